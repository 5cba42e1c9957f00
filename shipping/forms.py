"""The address form the checkout and the account's address book share."""

from django import forms
from django_countries import countries
from django_countries.fields import LazyTypedChoiceField

from core.errors import InvalidInput
from shipping.addresses import ADDRESS_FIELDS, address_clean, address_optional_fields


class AddressForm(forms.Form):
    """A postal address; the country's own rules (``shipping.addresses``) are shown beside each field."""

    full_name = forms.CharField(max_length=ADDRESS_FIELDS["full_name"], required=False)
    line1 = forms.CharField(label="Address", max_length=ADDRESS_FIELDS["line1"], required=False)
    line2 = forms.CharField(label="Address line 2", max_length=ADDRESS_FIELDS["line2"], required=False)
    city = forms.CharField(max_length=ADDRESS_FIELDS["city"], required=False)
    postal_code = forms.CharField(max_length=ADDRESS_FIELDS["postal_code"], required=False)
    region = forms.CharField(
        label="Region", max_length=ADDRESS_FIELDS["region"], required=False, help_text="State or province, if any."
    )
    country = LazyTypedChoiceField(
        choices=[("", "Choose a country")] + list(countries),
        required=False,
        error_messages={"invalid_choice": "Choose a country from the list."},  # as address_clean says it
    )
    phone = forms.CharField(max_length=ADDRESS_FIELDS["phone"], required=False)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["country"].widget.attrs["data-refresh-on-change"] = ""

    def clean(self):
        try:
            return address_clean(self.cleaned_data)
        except InvalidInput as exc:
            for field, message in exc.payload["fields"].items():
                if field not in self.errors:  # a field's own error says it already (not also "required")
                    self.add_error(field or None, message)
            return self.cleaned_data

    @property
    def country_chosen(self) -> str | None:
        """The country on the form, checked or not: enough to quote shipping before the rest is filled in."""
        value = (self.data.get(self.add_prefix("country")) if self.is_bound else self.initial.get("country")) or ""
        return value.upper() if value.upper() in countries else None

    @property
    def optional_fields(self) -> frozenset[str]:
        """The fields the chosen country lets the address leave empty: the page labels them "if any"."""
        return address_optional_fields(self.country_chosen)
