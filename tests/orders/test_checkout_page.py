"""The checkout page of goods that ship: the address form, the methods, the totals, without JavaScript."""

import re
from decimal import Decimal

import pytest
from django.test import Client

from inventory.errors import LockTimeout
from orders.models import Order
from tests.conftest import ADDRESS_DE, ADDRESS_US, assert_books_balance, pay, stock_of
from tests.orders.test_pages import add_to_cart, form_key, placed_then

pytestmark = pytest.mark.django_db


@pytest.fixture
def lamp(make_variant, shipping_rules):
    return make_variant(sku="LAMP", name="Desk lamp", stock=10, price="30.00", requires_shipping=True, weight_grams=900)


def address_fields(address: dict, prefix: str = "shipping") -> dict:
    return {f"{prefix}-{field}": value for field, value in address.items()}


def submit(client, *, key: str, action: str = "place", **fields) -> str:
    response = client.post("/checkout/", {"idempotency_key": key, "action": action, **fields})
    return response


def page_key(client) -> str:
    return form_key(client.get("/checkout/").content.decode())


def place_to_germany(client, shipping_rules):
    """Submit the checkout page of the cart as a guest, shipped to Germany by Standard."""
    return submit(
        client, key=page_key(client), email="ann@example.com", billing_same="on",
        shipping_method=shipping_rules["standard"].pk, **address_fields(ADDRESS_DE),
    )  # fmt: skip


def test_the_page_asks_where_to_ship_then_offers_the_methods_and_prices_them(client, lamp, shipping_rules):
    add_to_cart(client, "LAMP", 1)
    first = client.get("/checkout/").content.decode()
    assert 'name="shipping-full_name"' in first and "Choose the country to see how we can ship." in first

    update = submit(
        client, key=form_key(first), action="update", email="ann@example.com", **address_fields(ADDRESS_DE)
    ).content.decode()

    assert "Standard: €4.90" in update and "Express: €9.90" in update
    standard = shipping_rules["standard"].pk
    assert re.search(rf'value="{standard}"[^>]*checked', update)  # the cheapest, priced
    assert 'data-testid="total">€34.90<' in update and 'data-testid="tax">€5.57<' in update  # 34.90 holds 19%
    assert form_key(update) == form_key(first) and not Order.objects.exists()


def test_placing_stores_the_address_and_the_method_chosen(client, lamp, shipping_rules):
    add_to_cart(client, "LAMP", 2)
    express = shipping_rules["express"]

    placed = submit(
        client, key=page_key(client), email="ann@example.com", shipping_method=express.pk, billing_same="on",
        **address_fields(ADDRESS_DE),
    )  # fmt: skip

    order = Order.objects.get()
    assert placed["Location"] == f"/orders/{order.number}/"
    assert (order.shipping_method_name, order.shipping_price, order.total) == (
        "Express",
        Decimal("9.90"),
        Decimal("69.90"),
    )
    assert order.shipping_address["city"] == "Berlin" and order.billing_address is None
    page = client.get(placed["Location"]).content.decode()
    assert "Hauptstrasse 1" in page and "Express" in page and "€69.90" in page
    assert stock_of(lamp).reserved == 2


def test_a_separate_billing_address_is_asked_for_once_unticked(client, lamp, shipping_rules):
    add_to_cart(client, "LAMP", 1)
    key = page_key(client)
    fields = address_fields(ADDRESS_DE) | {"email": "ann@example.com", "shipping_method": shipping_rules["standard"].pk}

    shown = submit(client, key=key, action="update", **fields).content.decode()
    assert 'name="billing-full_name"' in shown  # the box is unticked (not sent): billing fields appear
    missing = submit(client, key=key, **fields).content.decode()
    assert 'data-testid="error-billing-full_name"' in missing and not Order.objects.exists()

    submit(client, key=key, **fields, **address_fields(ADDRESS_DE | {"full_name": "Firma GmbH"}, "billing"))
    assert Order.objects.get().billing_address["full_name"] == "Firma GmbH"


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"postal_code": "1234"}, "postal_code", "This is not a postal code of this country (for example"),
        ({"city": ""}, "city", "This field is required."),
        ({"full_name": ""}, "full_name", "This field is required."),
        ({"phone": "call me"}, "phone", "Give a phone number of digits"),
    ],
)
def test_a_bad_field_is_shown_beside_it_and_nothing_is_placed(client, lamp, shipping_rules, change, field, message):
    add_to_cart(client, "LAMP", 1)
    page = submit(
        client, key=page_key(client), email="ann@example.com", billing_same="on",
        shipping_method=shipping_rules["standard"].pk, **address_fields(ADDRESS_DE | change),
    ).content.decode()  # fmt: skip

    error = re.search(rf'data-testid="error-shipping-{field}">([^<]*)<', page)
    assert error and error.group(1).startswith(message.replace("'", "&#x27;"))
    assert not Order.objects.exists() and stock_of(lamp).reserved == 0


def test_a_country_no_zone_covers_is_told_beside_the_country(client, lamp):
    add_to_cart(client, "LAMP", 1)
    tokyo = {"full_name": "Taro Yamada", "line1": "1-1 Chiyoda", "city": "Chiyoda-ku", "postal_code": "100-0001",
             "region": "Tokyo", "country": "JP"}  # fmt: skip

    page = submit(client, key=page_key(client), email="ann@example.com", billing_same="on", **address_fields(tokyo))

    assert 'data-testid="error-shipping-country">We do not ship to Japan.<' in page.content.decode()
    assert not Order.objects.exists()


def test_goods_that_do_not_ship_ask_for_no_address(client, make_variant):
    make_variant(sku="TICKET", name="Party ticket", stock=10, price="15.00")
    add_to_cart(client, "TICKET", 2)

    page = client.get("/checkout/").content.decode()
    placed = submit(client, key=form_key(page), email="ann@example.com")

    assert "Shipping address" not in page and 'data-testid="total">€30.00<' in page
    order = Order.objects.get()
    assert placed["Location"] == f"/orders/{order.number}/"
    assert order.shipping_address is None and order.shipping_method_name == "" and order.total == 30


def ordered_once(client, customer, *, method, address: dict) -> None:
    """``customer`` logged in has ordered a lamp once, to ``address`` by ``method``: a returning customer."""
    customer.email = "alice@example.com"
    customer.save()
    client.force_login(customer)
    add_to_cart(client, "LAMP", 1)
    submit(client, key=page_key(client), shipping_method=method.pk, billing_same="on", **address_fields(address))


def test_a_returning_customer_is_offered_their_last_address(client, lamp, shipping_rules, customer):
    ordered_once(client, customer, method=shipping_rules["standard"], address=ADDRESS_DE | {"line1": "Lindenweg 7"})
    assert Order.objects.count() == 1

    add_to_cart(client, "LAMP", 1)
    page = client.get("/checkout/").content.decode()

    assert 'value="Lindenweg 7"' in page and "Standard: €4.90" in page  # the methods for that country, too


def test_an_unknown_outcome_keeps_the_whole_form_and_the_second_click_places_one_order(
    client, lamp, shipping_rules, monkeypatch
):
    add_to_cart(client, "LAMP", 1)
    key = page_key(client)
    fields = address_fields(ADDRESS_DE | {"line2": "Hinterhaus"}) | {
        "email": "ann@example.com", "shipping_method": shipping_rules["express"].pk, "billing_same": "on",
    }  # fmt: skip
    monkeypatch.setattr("orders.views.order_place", placed_then(LockTimeout.outcome_unknown(skus=["LAMP"])))
    page = submit(client, key=key, **fields).content.decode()
    monkeypatch.undo()

    assert "could not confirm your order" in page and form_key(page) == key
    assert 'value="Hinterhaus"' in page and 'value="ann@example.com"' in page
    assert re.search(rf'value="{shipping_rules["express"].pk}"[^>]*checked', page)
    second = submit(client, key=form_key(page), **fields)

    order = Order.objects.get()
    assert second["Location"] == f"/orders/{order.number}/" and order.shipping_method_name == "Express"
    assert stock_of(lamp).reserved == 1
    assert_books_balance(lamp)


def test_after_a_declined_payment_the_order_goes_back_to_the_cart(client, lamp, shipping_rules):
    add_to_cart(client, "LAMP", 3)
    place_to_germany(client, shipping_rules)
    order = Order.objects.get()
    assert "cart" not in client.session

    back = client.post(f"/orders/{order.number}/to-cart/")

    assert back["Location"] == "/cart/" and client.session["cart"] == {"LAMP": 3}
    assert client.__class__().post(f"/orders/{order.number}/to-cart/").status_code == 404  # not another browser's


def test_staff_see_an_orders_addresses_method_and_totals(client, lamp, shipping_rules, shop_staff):
    add_to_cart(client, "LAMP", 1)
    place_to_germany(client, shipping_rules)
    order = Order.objects.get()
    staff_admin = Client()
    staff_admin.force_login(shop_staff)

    page = staff_admin.get(f"/admin/orders/order/{order.pk}/change/").content.decode()
    zones = staff_admin.get("/admin/shipping/shippingzone/").content.decode()

    assert "Erika Mustermann" in page and "10115 Berlin" in page and "Germany" in page
    assert "€34.90" in page and "€5.57" in page and "Standard" in page
    assert "Germany, France" in zones


def test_a_paid_order_says_when_in_one_sentence_and_every_amount_with_its_currency(client, lamp, shipping_rules):
    add_to_cart(client, "LAMP", 1)
    place_to_germany(client, shipping_rules)
    order = pay(Order.objects.get())

    page = client.get(f"/orders/{order.number}/").content.decode()
    mine = client.get("/orders/").content.decode()

    assert "Paid: " in page and ".." not in page  # "Paid on ... p.m.." no more
    assert "€30.00" in page and "€34.90" in page and "€34.90" in mine


def test_a_returning_customer_whose_country_is_no_longer_served_is_told_not_failed(
    client, lamp, shipping_rules, customer
):
    ordered_once(client, customer, method=shipping_rules["overseas"], address=ADDRESS_US)
    shipping_rules["overseas"].zone.delete()  # staff stop shipping to the US

    add_to_cart(client, "LAMP", 1)
    page = client.get("/checkout/")

    assert page.status_code == 200 and "We do not ship to United States of America." in page.content.decode()
