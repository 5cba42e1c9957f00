"""API pieces every app's endpoints share: the refusal shape for the schema, strict integer input.

``config.api`` renders the refusals in this shape and maps their codes to HTTP statuses.
"""

from rest_framework import serializers


class ErrorSerializer(serializers.Serializer):
    """The shape of every refusal (for the schema)."""

    code = serializers.CharField(help_text="Stable machine-readable code, e.g. insufficient_stock.")
    detail = serializers.CharField(help_text="Human-readable explanation.")
    fields = serializers.DictField(help_text="Per input field, what is wrong (may be empty).")


class StrictIntegerField(serializers.IntegerField):
    """An integer that must be a JSON number: "2", 2.5 and true are refused, not coerced."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)
