"""Checkout of goods that ship: addresses, shipping methods, tax and the totals an order stores."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from orders.errors import OrderExpired
from orders.models import Order
from orders.pricing import tax_of
from orders.services import order_expire, order_place
from payments.providers.stripe import minor_units
from payments.services import order_pay
from shipping.models import ShippingMethod
from tax.models import TaxRate
from tests.conftest import ADDRESS_DE, ADDRESS_US, stock_of

pytestmark = pytest.mark.django_db


def place(client, items, key="key-1", **body):
    return client.post("/api/orders/", {"items": items, **body}, format="json", HTTP_IDEMPOTENCY_KEY=key)


@pytest.fixture
def goods(make_variant, shipping_rules):
    mug = make_variant(sku="MUG", stock=10, price="11.90", requires_shipping=True, weight_grams=400)
    book = make_variant(
        sku="BOOK", stock=10, price="21.40", requires_shipping=True, weight_grams=600, tax_class=shipping_rules["books"]
    )
    ticket = make_variant(sku="TICKET", stock=10, price="30.00")  # not shipped
    return {"mug": mug, "book": book, "ticket": ticket}


def test_a_shipped_order_stores_its_address_method_and_totals_taxed_inside_prices(
    customer_client, goods, shipping_rules
):
    standard = shipping_rules["standard"]
    response = place(
        customer_client,
        [{"sku": "MUG", "quantity": 2}, {"sku": "BOOK", "quantity": 1}],
        shipping_address=ADDRESS_DE,
        shipping_method=standard.pk,
    )

    assert response.status_code == 201, response.json()
    body = response.json()
    # Prices include tax: MUG 23.80 holds 19% = 3.80; BOOK 21.40 holds 7% = 1.40; shipping 4.90 holds 0.78.
    assert [(line["sku"], line["line_total"], line["tax_rate"], line["tax"]) for line in body["lines"]] == [
        ("MUG", "23.80", "19.000", "3.80"),
        ("BOOK", "21.40", "7.000", "1.40"),
    ]
    assert (body["subtotal"], body["shipping_price"], body["tax"], body["total"]) == ("45.20", "4.90", "5.98", "50.10")
    assert body["shipping_method"] == {"id": standard.pk, "name": "Standard", "price": "4.90"}
    assert body["shipping_address"]["city"] == "Berlin" and body["billing_address"] == body["shipping_address"]
    assert body["currency"] == "EUR" and body["prices_include_tax"] is True
    order = Order.objects.get()
    assert order.shipping_address["postal_code"] == "10115" and order.billing_address is None
    assert order.total == sum(line.line_total for line in order.lines.all()) + order.shipping_price
    assert order.tax == sum(line.tax for line in order.lines.all()) + order.shipping_tax


def test_a_tax_exclusive_shop_adds_the_tax_and_ships_free_above_the_threshold(
    customer_client, goods, shipping_rules, settings
):
    settings.PRICES_INCLUDE_TAX = False
    response = place(
        customer_client,
        [{"sku": "MUG", "quantity": 3}, {"sku": "BOOK", "quantity": 1}],
        shipping_address=ADDRESS_DE,
        shipping_method=shipping_rules["standard"].pk,
    )

    body = response.json()
    # 35.70 + 21.40 = 57.10 >= 50: standard is free. Tax: 35.70 x 19% = 6.783 -> 6.78; 21.40 x 7% = 1.498 -> 1.50.
    assert (body["subtotal"], body["shipping_price"], body["tax"], body["total"]) == ("57.10", "0.00", "8.28", "65.38")
    assert [line["tax"] for line in body["lines"]] == ["6.78", "1.50"]


def test_an_order_of_goods_that_do_not_ship_asks_for_no_address_or_method(customer_client, goods):
    response = place(customer_client, [{"sku": "TICKET", "quantity": 2}])

    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["shipping_address"] is None and body["shipping_method"] is None
    # Taxed in the shop's country (DE, 19% inside the price): 60.00 holds 9.58.
    assert (body["subtotal"], body["shipping_price"], body["tax"], body["total"]) == ("60.00", "0.00", "9.58", "60.00")


def test_shipped_goods_without_an_address_are_refused_naming_the_field(customer_client, goods):
    response = place(customer_client, [{"sku": "MUG", "quantity": 1}])

    assert response.status_code == 400
    assert response.json()["code"] == "invalid_input" and "shipping_address" in response.json()["fields"]
    assert stock_of(goods["mug"]).reserved == 0 and not Order.objects.exists()


def test_a_country_no_zone_covers_is_told_plainly(customer_client, goods, shipping_rules):
    tokyo = {"full_name": "Taro Yamada", "line1": "1-1 Chiyoda", "city": "Chiyoda-ku", "postal_code": "100-0001",
             "region": "Tokyo", "country": "JP"}  # fmt: skip
    response = place(
        customer_client,
        [{"sku": "MUG", "quantity": 1}],
        shipping_address=tokyo,
        shipping_method=shipping_rules["standard"].pk,
    )

    assert response.status_code == 409
    assert response.json()["code"] == "shipping_unavailable" and response.json()["country"] == "JP"
    assert response.json()["detail"] == "We do not ship to Japan."
    assert stock_of(goods["mug"]).reserved == 0


def test_a_method_that_does_not_go_there_or_take_the_weight_is_refused_with_those_that_do(
    customer_client, goods, shipping_rules
):
    to_us = place(
        customer_client, [{"sku": "MUG", "quantity": 1}], key="a", shipping_address=ADDRESS_US,
        shipping_method=shipping_rules["standard"].pk,
    )  # fmt: skip
    too_heavy = place(
        customer_client, [{"sku": "MUG", "quantity": 9}, {"sku": "BOOK", "quantity": 3}], key="b",
        shipping_address=ADDRESS_DE, shipping_method=shipping_rules["express"].pk,
    )  # fmt: skip

    assert to_us.status_code == too_heavy.status_code == 409
    assert to_us.json()["code"] == "shipping_method_unavailable" and to_us.json()["methods"] == [
        shipping_rules["overseas"].pk
    ]
    assert too_heavy.json()["methods"] == [shipping_rules["standard"].pk]  # 5.4 kg: express takes 5 at most
    assert not Order.objects.exists()


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"full_name": ""}, "full_name"),
        ({"line1": " "}, "line1"),
        ({"city": ""}, "city"),
        ({"postal_code": "ABCDE"}, "postal_code"),
        ({"postal_code": ""}, "postal_code"),
        ({"country": "XX"}, "country"),
        ({"country": ""}, "country"),
        ({"phone": "call me"}, "phone"),
        ({"line2": "x" * 201}, "line2"),
        ({"full_name": ["Erika"]}, "full_name"),
    ],
)
def test_every_bad_address_field_is_400_naming_it_and_places_nothing(
    customer_client, goods, shipping_rules, change, field
):
    response = place(
        customer_client,
        [{"sku": "MUG", "quantity": 1}],
        shipping_address=ADDRESS_DE | change,
        shipping_method=shipping_rules["standard"].pk,
    )

    assert response.status_code == 400, response.json()
    assert response.json()["code"] == "invalid_input"
    assert field in response.json()["fields"]["shipping_address"]
    assert not Order.objects.exists() and stock_of(goods["mug"]).reserved == 0


def test_a_region_the_country_requires_is_asked_for(customer_client, goods, shipping_rules):
    response = place(
        customer_client,
        [{"sku": "MUG", "quantity": 1}],
        shipping_address=ADDRESS_US | {"region": ""},
        shipping_method=shipping_rules["overseas"].pk,
    )

    assert response.status_code == 400
    assert "region" in response.json()["fields"]["shipping_address"]


def test_a_billing_address_of_its_own_is_kept_and_a_replay_with_another_address_is_a_conflict(
    customer_client, goods, shipping_rules
):
    billing = ADDRESS_DE | {"full_name": "Firma GmbH", "line1": "Ring 5"}
    body = {
        "shipping_address": ADDRESS_DE,
        "billing_address": billing,
        "shipping_method": shipping_rules["standard"].pk,
    }
    first = place(customer_client, [{"sku": "MUG", "quantity": 1}], **body)
    again = place(customer_client, [{"sku": "MUG", "quantity": 1}], **body)
    moved = place(
        customer_client,
        [{"sku": "MUG", "quantity": 1}],
        **body | {"shipping_address": ADDRESS_DE | {"city": "Hamburg", "postal_code": "20095"}},
    )
    other_method = place(
        customer_client, [{"sku": "MUG", "quantity": 1}], **body | {"shipping_method": shipping_rules["express"].pk}
    )

    assert first.status_code == again.status_code == 201 and again.json()["number"] == first.json()["number"]
    assert first.json()["billing_address"]["full_name"] == "Firma GmbH"
    assert moved.status_code == other_method.status_code == 422
    assert moved.json()["code"] == "idempotency_conflict"
    assert Order.objects.count() == 1 and stock_of(goods["mug"]).reserved == 1


def test_the_quote_offers_the_methods_cheapest_first_and_prices_the_cheapest(customer_client, goods, shipping_rules):
    response = customer_client.post(
        "/api/checkout/quote/",
        {"items": [{"sku": "MUG", "quantity": 1}], "shipping_address": ADDRESS_DE},
        format="json",
    )

    assert response.status_code == 200, response.json()
    body = response.json()
    assert [(m["name"], m["price"]) for m in body["shipping_methods"]] == [("Standard", "4.90"), ("Express", "9.90")]
    assert body["shipping_method"] == shipping_rules["standard"].pk
    assert (body["subtotal"], body["shipping_price"], body["tax"], body["total"]) == ("11.90", "4.90", "2.68", "16.80")
    assert not Order.objects.exists() and stock_of(goods["mug"]).reserved == 0


def test_a_yen_shop_rounds_tax_to_whole_yen_and_charges_its_stored_total(make_variant, shipping_rules, settings):
    settings.SHOP_CURRENCY = "JPY"
    yen_post = ShippingMethod.objects.create(zone=shipping_rules["standard"].zone, name="Yen post", price=500)
    make_variant(sku="TEA", stock=5, price="1080", requires_shipping=True)
    order = order_place(
        email="ann@example.com",
        items=[{"sku": "TEA", "quantity": 3}],
        idempotency_key="k",
        shipping_address=ADDRESS_DE,
        shipping_method=yen_post.pk,
    )

    # 3240 holds 19%: 517.31 -> 517 yen; the shipping's 500 holds 79.83 -> 80 yen.
    assert (order.currency, order.lines.get().tax, order.shipping_tax, order.tax) == ("JPY", 517, 80, 597)
    assert order.total == Decimal(3740)
    payment = order_pay(order=order, return_url="https://shop.example.com/")
    assert (payment.amount, payment.currency) == (Decimal(3740), "JPY")
    assert minor_units(payment.amount, payment.currency) == 3740  # what Stripe receives: yen, not cents


def _expired_shipped_order(shipping_rules):
    order = order_place(
        email="ann@example.com",
        items=[{"sku": "MUG", "quantity": 1}],
        idempotency_key="late",
        shipping_address=ADDRESS_DE,
        shipping_method=shipping_rules["standard"].pk,
    )
    Order.objects.filter(pk=order.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert order_expire(order=Order.objects.get(pk=order.pk))
    return Order.objects.get(pk=order.pk)


@pytest.mark.parametrize(
    "change",
    [
        lambda rules: TaxRate.objects.filter(country="DE", tax_class=None).update(rate=Decimal(16)),
        lambda rules: ShippingMethod.objects.filter(pk=rules["standard"].pk).update(price=Decimal("5.90")),
        lambda rules: ShippingMethod.objects.filter(pk=rules["standard"].pk).update(is_active=False),
    ],
    ids=["tax-rate", "shipping-price", "method-withdrawn"],
)
def test_paying_an_expired_order_checks_its_stored_totals_still_hold(goods, shipping_rules, change):
    order = _expired_shipped_order(shipping_rules)
    change(shipping_rules)

    with pytest.raises(OrderExpired):
        order_pay(order=order, return_url="https://shop.example.com/")

    assert Order.objects.get(pk=order.pk).status == "expired" and stock_of(goods["mug"]).reserved == 0


def test_an_expired_order_whose_totals_hold_is_revived_and_charged_its_stored_total(goods, shipping_rules):
    order = _expired_shipped_order(shipping_rules)

    payment = order_pay(order=order, return_url="https://shop.example.com/")

    assert payment.amount == Decimal("16.80") == Order.objects.get(pk=order.pk).total
    assert Order.objects.get(pk=order.pk).status == "awaiting_payment" and stock_of(goods["mug"]).reserved == 1


@pytest.mark.parametrize(
    ("amount", "rate", "included", "currency", "tax"),
    [
        (Decimal("10.00"), Decimal(19), True, "EUR", Decimal("1.60")),  # 1.5966 up
        (Decimal("10.00"), Decimal(19), False, "EUR", Decimal("1.90")),
        (Decimal("0.05"), Decimal(10), False, "EUR", Decimal("0.01")),  # 0.005: half up, never to even
        (Decimal("0.15"), Decimal(10), False, "EUR", Decimal("0.02")),  # 0.015: half up
        (Decimal("1080"), Decimal(10), True, "JPY", Decimal("98")),  # 98.18 in whole yen
        (Decimal("1150"), Decimal(10), False, "JPY", Decimal("115")),
        (Decimal("9.99"), Decimal(0), True, "EUR", Decimal("0.00")),
    ],
)
def test_the_rounding_rule_rounds_each_line_half_up_to_the_currencys_places(amount, rate, included, currency, tax):
    assert tax_of(amount, rate, included=included, currency=currency) == tax
