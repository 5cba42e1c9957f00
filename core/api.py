"""API pieces every app's endpoints share: the refusal shape for the schema, strict integer input, the parser.

``config.api`` renders the refusals in this shape and maps their codes to HTTP statuses.
"""

from rest_framework import parsers, serializers
from rest_framework.exceptions import ParseError


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


class StrictCharField(serializers.CharField):
    """A string that must be a JSON string: 123 and true are refused, not coerced."""

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, with a body nested deeper than Python's recursion limit refused as malformed.

    The standard library's decoder raises ``RecursionError`` there, which DRF does not catch: any
    anonymous caller could turn a request into a 500.
    """

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - the body is nested too deeply.") from None
