"""Amounts in the shop's currency: rounded to the places the currency has, and shown formatted for the locale.

Stored amounts have two decimal places at most. A currency without a minor unit (JPY, KRW, ...) or that
is charged in whole units only (ISK) rounds to whole units; a three-decimal one (KWD, ...) to two places,
since Stripe takes those only with a last digit of 0. The lists are Stripe's ("Supported currencies").
"""

from decimal import ROUND_HALF_UP, Decimal

from babel.numbers import format_currency
from django.conf import settings
from django.utils.translation import get_language, to_locale

ZERO_DECIMAL_CURRENCIES = frozenset("BIF CLP DJF GNF JPY KMF KRW MGA PYG RWF UGX VND VUV XAF XOF XPF".split())
THREE_DECIMAL_CURRENCIES = frozenset("BHD JOD KWD OMR TND".split())  # the last digit must be 0
WHOLE_UNITS_ONLY = frozenset({"ISK"})  # two decimals on Stripe's wire, but only whole krónur


def currency_places(currency: str) -> int:
    """The decimal places the shop keeps for an amount in ``currency``."""
    currency = currency.upper()
    return 0 if currency in ZERO_DECIMAL_CURRENCIES or currency in WHOLE_UNITS_ONLY else 2


def money_round(amount: Decimal, currency: str | None = None) -> Decimal:
    """``amount`` rounded half up (away from zero) to ``currency``'s places: the shop's one rounding rule."""
    places = currency_places(currency or settings.SHOP_CURRENCY)
    return Decimal(amount).quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


def money_format(amount, currency: str | None = None) -> str:
    """``amount`` with its currency, formatted for the active language (``1.234,50 €`` in German)."""
    if amount is None or amount == "":
        return ""
    currency = currency or settings.SHOP_CURRENCY
    return format_currency(Decimal(amount), currency, locale=to_locale(get_language() or settings.LANGUAGE_CODE))
