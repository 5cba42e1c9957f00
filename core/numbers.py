"""The one reading of a number that anyone typed or sent: a quantity, an id, a price, a stock count.

ASCII digits only, of a bounded length, in the range the input allows. Python's own readers are more
generous, each in its own way: ``int()`` takes "٣", "１" and " 3 ", ``str.isdigit()`` passes "²" that
``int()`` then refuses, ``Decimal()`` takes "1e3" and "٣", and a 5,000-digit string is past ``int()``'s
limit. Read through here, every page, form and API refuses the same inputs, with a message for people,
never a 500. ``NumberInvalid`` is a ``ValueError``: the forms and serializers below turn it into their
own validation errors, and a view into its refusal (``invalid_quantity``, ``invalid_input``).
"""

import re
from decimal import Decimal

from django import forms
from django.core.exceptions import ValidationError

WHOLE = re.compile(r"[0-9]+")
DECIMAL = re.compile(r"(?P<whole>[0-9]+)(?:\.(?P<fraction>[0-9]+))?")
# Most digits any number read here has (a stock count of MAX_STOCK_QUANTITY, a price): no input longer
# than this reaches int() or Decimal().
DIGITS_MAX = 12


PAGE_MAX = 999_999_999  # the furthest page a list is asked for (pages stop at LIST_COUNT_LIMIT rows long before)


class NumberInvalid(ValueError):
    """Not a number the input takes; ``str()`` says what it takes, to a person."""


def number_whole(value, *, low: int = 0, high: int = 10**DIGITS_MAX - 1) -> int:
    """``value`` (ASCII digits, or an ``int`` that is not a bool) as a whole number from ``low`` to ``high``."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and len(value) <= len(str(high)) and WHOLE.fullmatch(value):
        number = int(value)
    else:
        raise NumberInvalid(f"Give a whole number from {low} to {high}, in digits 0-9.")
    if not low <= number <= high:
        raise NumberInvalid(f"Give a whole number from {low} to {high}.")
    return number


def number_decimal(value, *, places: int, low: Decimal, high: Decimal) -> Decimal:
    """``value`` (ASCII digits with at most ``places`` after a point, or an ``int``) from ``low`` to ``high``."""
    if isinstance(value, int) and not isinstance(value, bool):
        number = Decimal(value)
    else:
        text = value if isinstance(value, str) and len(value) <= DIGITS_MAX + 1 + places else ""
        match = DECIMAL.fullmatch(text)
        if match is None or len(match["fraction"] or "") > places:
            raise NumberInvalid(f"Give an amount from {low} to {high} in digits 0-9, with at most {places} decimals.")
        number = Decimal(text)
    if not low <= number <= high:
        raise NumberInvalid(f"Give an amount from {low} to {high}.")
    return number


class WholeNumberField(forms.Field):
    """A form's whole number, read by ``number_whole``; ``min_value`` and ``max_value`` bound it."""

    def __init__(self, *, min_value: int = 0, max_value: int = 10**DIGITS_MAX - 1, **kwargs):
        self.min_value, self.max_value = min_value, max_value
        kwargs.setdefault("widget", forms.NumberInput(attrs={"min": min_value, "max": max_value, "step": 1}))
        super().__init__(**kwargs)

    def to_python(self, value):
        if value in self.empty_values:
            return None
        try:
            return number_whole(value, low=self.min_value, high=self.max_value)
        except NumberInvalid as exc:
            raise ValidationError(str(exc), code="invalid") from None


class AmountField(forms.Field):
    """A form's amount of money (or a rate), read by ``number_decimal``: never negative, at most
    ``max_digits`` digits of which ``decimal_places`` after the point (a model's ``DecimalField``'s own)."""

    def __init__(self, *, max_digits: int = 12, decimal_places: int = 2, min_value=Decimal(0), **kwargs):
        self.places, self.min_value = decimal_places, Decimal(min_value)
        self.max_value = Decimal(10 ** (max_digits - decimal_places)) - Decimal(1).scaleb(-decimal_places)
        step = Decimal(1).scaleb(-decimal_places)
        kwargs.setdefault("widget", forms.NumberInput(attrs={"min": self.min_value, "step": step}))
        super().__init__(**kwargs)

    def to_python(self, value):
        if value in self.empty_values:
            return None
        try:
            return number_decimal(value, places=self.places, low=self.min_value, high=self.max_value)
        except NumberInvalid as exc:
            raise ValidationError(str(exc), code="invalid") from None
