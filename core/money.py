"""Amounts in the shop's currency: rounded to the places the currency has, and shown formatted for the locale.

Stored amounts have two decimal places at most. How many a currency has is the payment provider's word
(``currency_places`` of the provider new checkouts use): the shop never computes an amount it could not
charge. Stripe's (and the local provider's): none for JPY, KRW, ... and for ISK (charged in whole units
only), two for KWD and the other three-decimal currencies (Stripe takes those only with a last digit of 0).
"""

from decimal import ROUND_HALF_UP, Decimal
from functools import cache

from babel.numbers import format_currency
from django.conf import settings
from django.utils.module_loading import import_string
from django.utils.translation import get_language, to_locale

STORED_PLACES = 2  # the amount columns' decimal_places

# The provider's class, named by settings as Django names its backends: core imports no app.
_provider_class = cache(import_string)


def currency_places(currency: str) -> int:
    """The decimal places the shop keeps for an amount in ``currency``: those the provider new checkouts use
    (``PAYMENT_PROVIDER``) charges exactly, at most ``STORED_PLACES``."""
    provider = _provider_class(settings.PAYMENT_PROVIDERS[settings.PAYMENT_PROVIDER])
    return min(STORED_PLACES, provider.currency_places(currency.upper()))


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
