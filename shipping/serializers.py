"""The address the order API and the account API read and show."""

from rest_framework import serializers

from core.errors import InvalidInput
from shipping.addresses import ADDRESS_FIELDS, address_clean


class AddressSerializer(serializers.Serializer):
    """A postal address, checked against its country's rules (``shipping.addresses``)."""

    full_name = serializers.CharField(max_length=ADDRESS_FIELDS["full_name"])
    line1 = serializers.CharField(max_length=ADDRESS_FIELDS["line1"])
    line2 = serializers.CharField(max_length=ADDRESS_FIELDS["line2"], required=False, allow_blank=True)
    city = serializers.CharField(max_length=ADDRESS_FIELDS["city"])
    postal_code = serializers.CharField(
        max_length=ADDRESS_FIELDS["postal_code"],
        required=False,
        allow_blank=True,
        help_text="Where the country uses one.",
    )
    region = serializers.CharField(
        max_length=ADDRESS_FIELDS["region"],
        required=False,
        allow_blank=True,
        help_text="State, province or prefecture, where the country uses one (its code or name).",
    )
    country = serializers.CharField(max_length=2, min_length=2, help_text="ISO 3166-1 alpha-2 code, e.g. DE.")
    phone = serializers.CharField(max_length=ADDRESS_FIELDS["phone"], required=False, allow_blank=True)

    def validate(self, attrs):
        try:
            return address_clean(attrs)
        except InvalidInput as exc:
            raise serializers.ValidationError(exc.payload["fields"]) from None
