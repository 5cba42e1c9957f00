"""The shop rounds to the places the payment provider new checkouts use charges exactly, two at most."""

from decimal import Decimal

import pytest

from core.money import currency_places, money_round
from payments.providers.local import LocalProvider


class WholeForints(LocalProvider):
    """A provider that charges forints in whole units only, and dinars to the fils."""

    @staticmethod
    def currency_places(currency: str) -> int:
        return {"HUF": 0, "KWD": 3}.get(currency, 2)


@pytest.fixture
def whole_forints(settings):
    settings.PAYMENT_PROVIDERS = {**settings.PAYMENT_PROVIDERS, "forints": f"{__name__}.WholeForints"}
    settings.PAYMENT_PROVIDER = "forints"


@pytest.mark.parametrize("provider", ["stripe", "local"])
@pytest.mark.parametrize(
    ("currency", "places", "rounded"),
    [("EUR", 2, "1795.51"), ("jpy", 0, "1796"), ("ISK", 0, "1796"), ("KWD", 2, "1795.51"), ("HUF", 2, "1795.51")],
)
def test_with_stripe_or_the_local_provider_the_shop_rounds_as_stripe_charges(
    settings, provider, currency, places, rounded
):
    settings.PAYMENT_PROVIDER = provider

    assert currency_places(currency) == places
    assert money_round(Decimal("1795.505"), currency) == Decimal(rounded)


def test_the_rounding_follows_the_provider_new_checkouts_use_and_keeps_two_places_at_most(whole_forints):
    assert money_round(Decimal("1795.50"), "HUF") == Decimal("1796")  # 10% off 1995 Ft, chargeable
    assert currency_places("KWD") == 2  # the amounts are stored with two
    assert currency_places("EUR") == 2
