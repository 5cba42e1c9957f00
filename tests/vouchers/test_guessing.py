"""Voucher codes cannot be guessed by trying them: refused codes count against the client (and the
account) across the quote, the checkout page's totals and placing an order; past the rate, 429."""

import pytest

from orders.models import Order
from tests.orders.test_pages import add_to_cart, form_key
from tests.vouchers.test_placing import place_api

pytestmark = pytest.mark.django_db

MUG = [{"sku": "MUG", "quantity": 1}]


@pytest.fixture(autouse=True)
def shop(settings, make_variant, make_voucher):
    settings.VOUCHER_THROTTLE_RATE = "3/minute"
    make_variant(sku="MUG", stock=20, price="12.50")
    make_voucher(code="DROP20")


def quote(client, code: str, ip: str = "10.3.0.1"):
    return client.post("/api/checkout/quote/", {"items": MUG, "voucher": code}, format="json", REMOTE_ADDR=ip)


def assert_throttled(response):
    assert response.status_code == 429 and response.json()["code"] == "throttled", response.content
    assert 1 <= int(response["Retry-After"]) <= 60


def test_refused_codes_are_throttled_on_the_quote_and_codes_that_apply_are_not_counted(customer_client):
    assert [quote(customer_client, "DROP20").status_code for _ in range(5)] == [200] * 5
    assert [quote(customer_client, f"GUESS{n}").status_code for n in range(3)] == [409] * 3

    assert_throttled(quote(customer_client, "GUESS9"))
    assert_throttled(quote(customer_client, "DROP20"))  # a hit is not told apart while throttled
    assert quote(customer_client, "", ip="10.3.0.1").status_code == 200  # no code: nothing to guess


def test_placing_an_order_shares_the_budget_and_the_account_keeps_it_from_another_address(customer_client):
    assert quote(customer_client, "GUESS1").status_code == 409
    assert place_api(customer_client, MUG, voucher="GUESS2", REMOTE_ADDR="10.3.0.1").status_code == 409
    assert quote(customer_client, "GUESS3", ip="10.3.0.2").status_code == 409

    assert_throttled(place_api(customer_client, MUG, voucher="GUESS4", REMOTE_ADDR="10.3.0.3"))
    assert not Order.objects.exists()


def test_the_checkout_pages_update_totals_shares_the_budget(client, customer_client):
    add_to_cart(client, "MUG", 1)
    key = form_key(client.get("/checkout/").content.decode())

    def update(code: str):
        body = {"idempotency_key": key, "voucher": code, "action": "update"}
        return client.post("/checkout/", body, REMOTE_ADDR="10.3.1.1")

    assert [update(f"GUESS{n}").status_code for n in range(3)] == [200] * 3
    refused = update("DROP20")
    assert refused.status_code == 429 and 1 <= int(refused["Retry-After"]) <= 60
    assert_throttled(quote(customer_client, "GUESS9", ip="10.3.1.1"))  # the API, from the same address
