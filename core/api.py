"""API pieces every app's endpoints share: the refusal shape for the schema, strict integer input, the parser.

``config.api`` renders the refusals in this shape and maps their codes to HTTP statuses.
"""

import functools
from decimal import Decimal

from drf_spectacular.utils import OpenApiResponse
from rest_framework import parsers, serializers
from rest_framework.exceptions import ParseError

from core.numbers import DIGITS_MAX, NumberInvalid, number_decimal, number_whole


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


class QueryIntegerField(serializers.IntegerField):
    """A whole number in a query string, read by ``core.numbers.number_whole``: ASCII digits only."""

    def to_internal_value(self, data):
        low = self.min_value if self.min_value is not None else 0
        high = self.max_value if self.max_value is not None else 10**DIGITS_MAX - 1
        try:
            return number_whole(data, low=low, high=high)
        except NumberInvalid as exc:
            raise serializers.ValidationError(str(exc), code="invalid") from None


class StrictDecimalField(serializers.DecimalField):
    """An amount sent as a JSON number or as text of ASCII digits (``core.numbers.number_decimal``): "1e3",
    "٣" and "NaN", which ``Decimal()`` reads, are refused."""

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, (str, int, float)):
            self.fail("invalid")
        if isinstance(data, str):
            high = Decimal(10 ** (self.max_digits - self.decimal_places)) - Decimal(1).scaleb(-self.decimal_places)
            try:
                number_decimal(data, places=self.decimal_places, low=Decimal(0), high=high)
            except NumberInvalid as exc:
                raise serializers.ValidationError(str(exc), code="invalid") from None
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


# What every API view that takes a caller answers when the caller is not one (the schema's 401 and 403).
UNAUTHENTICATED = OpenApiResponse(ErrorSerializer, description="not_authenticated, authentication_failed")
CSRF_REFUSED = OpenApiResponse(ErrorSerializer, description="permission_denied: session auth without a CSRF token")


class FieldsBoundOnce(serializers.Serializer):
    """An output serializer whose fields are bound once per process and class, not deep-copied for each
    instance: DRF copies every declared field for each serializer it makes, which costs an order
    response more than rendering it. What it renders is DRF's own rendering of the declared fields, so
    a field is written once, where it is declared. For output only: instances keep no state of theirs."""

    def to_representation(self, instance):
        return serializers.Serializer.to_representation(_bound_once(type(self)), instance)


@functools.cache
def _bound_once(serializer_class: type[serializers.Serializer]) -> serializers.Serializer:
    return serializer_class()
