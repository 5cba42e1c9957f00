"""The cart page: its total, its remove buttons, and the quantities it refuses, named and explained."""

import re

import pytest

from orders.services import order_place
from tests.conftest import messages_of

pytestmark = pytest.mark.django_db


@pytest.fixture
def mug(make_variant):
    """10 in stock, at most 2 per customer."""
    variant = make_variant(sku="MUG-LOGO", name="Logo mug", stock=10, price="12.50")
    variant.max_per_customer = 2
    variant.save()
    return variant


@pytest.fixture
def tee(make_variant):
    return make_variant(sku="TEE", name="Black tee", stock=3, price="19.00")


def add(client, sku, quantity):
    return client.post(f"/cart/add/{sku}/", {"quantity": quantity})


def update(client, sku, quantity):
    return client.post(f"/cart/update/{sku}/", {"quantity": quantity})


def told(response) -> str:
    """The message this request added (those of earlier requests wait behind it, unshown)."""
    return messages_of(response)[-1]


def test_the_cart_shows_its_total_and_prices_with_the_currency(client, mug, tee):
    add(client, "MUG-LOGO", 2)
    add(client, "TEE", 1)
    page = client.get("/cart/").content.decode()
    assert "€12.50" in page and "€25.00" in page and "€19.00" in page
    assert re.search(r'data-testid="cart-total">€44.00<', page)


def test_the_catalog_and_variant_pages_show_prices_with_the_currency(client, mug):
    assert "€12.50" in client.get("/").content.decode()
    page = client.get("/products/MUG-LOGO/").content.decode()
    assert "€12.50" in page and 'max="2"' in page  # the most one customer may have


def test_each_line_has_a_remove_button_posting_zero_with_its_csrf_token(client, mug, tee):
    add(client, "MUG-LOGO", 1)
    add(client, "TEE", 2)
    page = client.get("/cart/").content.decode()
    forms = re.findall(r'<form method="post" action="/cart/update/TEE/">(.*?)</form>', page, re.S)
    remove = next(form for form in forms if ">Remove</button>" in form)
    assert 'name="csrfmiddlewaretoken"' in remove and 'name="quantity" value="0"' in remove

    update(client, "TEE", 0)

    assert client.session["cart"] == {"MUG-LOGO": 1}
    assert "Black tee" not in client.get("/cart/").content.decode()


@pytest.mark.parametrize(
    "quantity, reason",
    [
        ("abc", "the quantity must be a whole number; you can have at most 2."),
        ("1.5", "the quantity must be a whole number; you can have at most 2."),
        ("0", "add at least 1; you can have at most 2."),
        ("-3", "add at least 1; you can have at most 2."),
        ("1001", "at most 1000 per order line; you can have at most 2."),
        ("50", "at most 2 per customer; you can have at most 2."),
    ],
)
def test_adding_refuses_a_quantity_the_shop_cannot_sell_naming_the_variant(client, mug, quantity, reason):
    response = add(client, "MUG-LOGO", quantity)
    assert told(response) == f"Logo mug: {reason}"
    assert "MUG-LOGO" not in told(response)  # the name, never the SKU
    assert client.session.get("cart", {}) == {}


def test_adding_refuses_more_than_is_available_or_allowed_with_what_is_in_the_cart(client, mug, tee):
    add(client, "TEE", 2)
    response = add(client, "TEE", 2)
    assert told(response) == "Black tee: only 3 available now; you can add at most 1 more (2 already in your cart)."
    add(client, "MUG-LOGO", 2)
    response = add(client, "MUG-LOGO", 1)
    assert told(response) == "Logo mug: at most 2 per customer; your cart holds the most you can have (2)."
    assert client.session["cart"] == {"TEE": 2, "MUG-LOGO": 2}


@pytest.mark.parametrize(
    "quantity, reason",
    [
        ("abc", "the quantity must be a whole number"),
        ("-1", "the quantity cannot be negative"),
        ("1001", "at most 1000 per order line"),
        ("3", "at most 2 per customer"),
    ],
)
def test_updating_refuses_a_quantity_the_shop_cannot_sell_and_keeps_the_line(client, mug, quantity, reason):
    add(client, "MUG-LOGO", 1)
    response = update(client, "MUG-LOGO", quantity)
    assert told(response) == f"Logo mug: {reason}; you can have at most 2."
    assert client.session["cart"] == {"MUG-LOGO": 1}


def test_updating_refuses_more_than_is_available_now(client, tee):
    add(client, "TEE", 1)
    response = update(client, "TEE", 4)
    assert told(response) == "Black tee: only 3 available now; you can have at most 3."
    assert client.session["cart"] == {"TEE": 1}
    update(client, "TEE", 3)
    assert client.session["cart"] == {"TEE": 3}


def test_a_sold_out_variant_is_said_to_be_sold_out_not_available_zero(client, tee, make_variant):
    make_variant(sku="CAP", name="Navy cap", stock=0, price="22.00")
    add(client, "TEE", 2)
    order_place(email="bob@example.com", items=[{"sku": "TEE", "quantity": 3}], idempotency_key="all-of-them")

    assert told(add(client, "CAP", 1)) == "Navy cap is sold out."
    assert told(add(client, "TEE", 1)) == "Black tee is sold out."
    assert told(update(client, "TEE", 1)) == "Black tee is sold out."
    assert client.session["cart"] == {"TEE": 2}


def test_a_variant_that_left_the_catalog_is_named_by_its_name(client, mug, tee):
    add(client, "MUG-LOGO", 1)
    add(client, "TEE", 1)
    tee.is_active = False
    tee.save()
    mug.delete()  # soft: its name is still known

    page = client.get("/cart/")

    assert messages_of(page)[-2:] == [
        "Logo mug is no longer for sale and was removed from your cart.",
        "Black tee is no longer for sale and was removed from your cart.",
    ]
    assert told(add(client, "TEE", 1)) == "Black tee is no longer for sale."
    assert told(add(client, "NO-SUCH-SKU", 1)) == "An item is no longer for sale."
    assert client.session["cart"] == {}
