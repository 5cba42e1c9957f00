"""What the checkout page tells a newcomer: one message where one is due, labels that say what is required,
and a voucher's refusal that names its minimum."""

import re
from decimal import Decimal

import pytest

from orders.models import Order
from orders.services import order_place
from tests.conftest import ADDRESS_DE
from tests.orders.test_checkout_page import address_fields, page_key, submit
from tests.orders.test_pages import add_to_cart

pytestmark = pytest.mark.django_db

TOKYO = {"full_name": "Taro Yamada", "line1": "1-1 Chiyoda", "city": "Chiyoda-ku", "postal_code": "100-0001",
         "region": "Tokyo", "country": "JP"}  # fmt: skip


@pytest.fixture
def lamp(make_variant, shipping_rules):
    return make_variant(sku="LAMP", name="Desk lamp", stock=10, price="30.00", requires_shipping=True, weight_grams=900)


def errors_of(page: str) -> list[str]:
    return re.findall(r'<p class="error"[^>]*>([^<]*)<', page)


@pytest.mark.parametrize("action", ["place", "update"])
def test_a_country_no_zone_covers_shows_only_that_even_with_a_method_chosen_before(
    client, lamp, shipping_rules, action
):
    add_to_cart(client, "LAMP", 1)
    page = submit(
        client, key=page_key(client), action=action, email="ann@example.com", billing_same="on",
        shipping_method=shipping_rules["standard"].pk, **address_fields(TOKYO),
    ).content.decode()  # fmt: skip

    assert set(errors_of(page)) == {"We do not ship to Japan."}  # beside the country and the methods
    assert not Order.objects.exists()


def label_of(page: str, field: str) -> str:
    """The text of the label holding the input ``field``, tags stripped."""
    label = re.search(rf'<label>((?:(?!</label>).)*name="shipping-{field}"(?:(?!</label>).)*)</label>', page, re.S)
    return " ".join(re.sub(r"<[^>]+>", " ", label.group(1)).split())


@pytest.mark.parametrize(
    ("address", "optional", "required"),
    [
        (ADDRESS_DE, ["line2", "region", "phone"], ["postal_code"]),  # Germany asks for a postal code
        (TOKYO | {"country": "IE", "city": "Dublin"}, ["line2", "postal_code", "region", "phone"], []),
        (TOKYO | {"country": "US"}, ["line2", "phone"], ["postal_code", "region"]),
    ],
)
def test_a_field_is_labelled_if_any_only_where_the_country_does_not_require_it(
    client, lamp, shipping_rules, address, optional, required
):
    add_to_cart(client, "LAMP", 1)
    page = submit(
        client, key=page_key(client), action="update", email="ann@example.com", billing_same="on",
        **address_fields(address | {"postal_code": "", "region": ""}),
    ).content.decode()  # fmt: skip

    for field in optional:
        assert label_of(page, field).endswith("(if any)"), (field, label_of(page, field))
    for field in required:
        assert "(if any)" not in label_of(page, field), (field, label_of(page, field))


def test_without_a_country_no_field_a_country_may_require_is_called_optional(client, lamp):
    add_to_cart(client, "LAMP", 1)
    page = client.get("/checkout/").content.decode()

    assert "(if any)" not in label_of(page, "postal_code") and "(if any)" not in label_of(page, "region")
    assert label_of(page, "line2").endswith("(if any)") and label_of(page, "phone").endswith("(if any)")


def test_a_voucher_minimum_not_reached_names_the_minimum_with_its_currency(client, customer_client, lamp, make_voucher):
    make_voucher(code="BIG", minimum_subtotal=Decimal("100.00"))
    add_to_cart(client, "LAMP", 1)

    page = submit(
        client, key=page_key(client), action="update", email="ann@example.com", voucher="BIG",
        **address_fields(ADDRESS_DE),
    ).content.decode()  # fmt: skip
    quote = customer_client.post(
        "/api/checkout/quote/", {"items": [{"sku": "LAMP", "quantity": 1}], "voucher": "BIG"}, format="json"
    )

    error = re.search(r'data-testid="error-voucher">([^<]*)<', page).group(1)
    assert error == "Your order does not reach this voucher&#x27;s minimum of €100.00."
    assert quote.json()["detail"] == "Your order does not reach this voucher's minimum of €100.00."
    assert quote.json()["minimum"] == "100.00" and quote.json()["reason"] == "minimum_not_met"


def test_a_line_sold_out_since_it_was_added_says_sold_out_not_only_0_left(client, make_variant, shipping_rules):
    make_variant(sku="TICKET", name="Party ticket", stock=2, price="15.00")
    add_to_cart(client, "TICKET", 2)
    order_place(email="bob@example.com", items=[{"sku": "TICKET", "quantity": 2}], idempotency_key="all-of-them")

    page = submit(client, key=page_key(client), email="ann@example.com").content.decode()

    shortage = re.search(r'data-testid="shortage">(.*?)</div>', page, re.S).group(1)
    assert re.sub(r"<[^>]+>", "", shortage) == "Sold out: remove it from your cart."
    assert Order.objects.count() == 1  # bob's


def test_a_country_not_on_the_list_is_told_once_beside_the_country(client, lamp, shipping_rules):
    add_to_cart(client, "LAMP", 1)
    page = submit(
        client, key=page_key(client), email="ann@example.com", billing_same="on",
        shipping_method=shipping_rules["standard"].pk, **address_fields(ADDRESS_DE | {"country": "XX"}),
    ).content.decode()  # fmt: skip

    assert re.findall(r'data-testid="error-shipping-country">([^<]*)<', page) == ["Choose a country from the list."]
    assert "Select a valid choice" not in page and not Order.objects.exists()


def test_a_name_too_long_is_told_once_not_also_called_missing(client, lamp, shipping_rules):
    add_to_cart(client, "LAMP", 1)
    page = submit(
        client, key=page_key(client), email="ann@example.com", billing_same="on",
        shipping_method=shipping_rules["standard"].pk, **address_fields(ADDRESS_DE | {"full_name": "E" * 101}),
    ).content.decode()  # fmt: skip

    [error] = re.findall(r'data-testid="error-shipping-full_name">([^<]*)<', page)
    assert "at most 100 characters" in error and not Order.objects.exists()
