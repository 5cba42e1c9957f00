"""A free order (a 100% voucher with nothing to ship, a free product) is paid as soon as it is placed, without a
provider: its stock and voucher use are committed, its receipt is emailed, and the buyer sees it paid."""

import uuid
from decimal import Decimal

import pytest
from django.core.management import call_command

from fulfilment.emails import order_email_list_send
from orders.errors import OrderNotPayable
from orders.models import Order
from orders.services import order_place
from payments.models import Payment
from payments.services import order_pay
from tests.conftest import assert_books_balance, assert_voucher_books, stock_of
from tests.orders.test_pages import add_to_cart, form_key
from tests.vouchers.test_placing import place_api, uses

pytestmark = pytest.mark.django_db


@pytest.fixture
def free_mug(make_variant, make_voucher):
    mug = make_variant(sku="MUG", name="Logo mug", stock=10, price="12.50")
    return {"mug": mug, "voucher": make_voucher(code="ALLFREE", kind="percentage", value="100")}


def assert_paid_for_free(order: Order, *, mug, voucher=None) -> None:
    order = Order.all_objects.get(pk=order.pk)
    assert (order.total, order.status) == (Decimal("0.00"), Order.Status.PAID) and order.paid_at is not None
    assert not Payment.objects.filter(order=order).exists()
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (8, 0)
    assert_books_balance(mug)
    if voucher is not None:
        assert uses(voucher) == (0, 1)
        assert_voucher_books(voucher)
    call_command("reconcile", "--full")


def test_a_free_order_is_paid_at_once_without_a_provider_and_its_receipt_is_emailed(free_mug, provider, inbox):
    order = order_place(
        email="ann@example.com", items=[{"sku": "MUG", "quantity": 2}], idempotency_key="k", voucher="ALLFREE"
    )

    assert order.status == Order.Status.PAID
    assert_paid_for_free(order, mug=free_mug["mug"], voucher=free_mug["voucher"])
    assert provider.checkouts == []
    order_email_list_send()
    [receipt] = inbox.take()
    assert receipt["Subject"] == f"Order {order.number}: paid, thank you"
    again = order_place(
        email="ann@example.com", items=[{"sku": "MUG", "quantity": 2}], idempotency_key="k", voucher="ALLFREE"
    )
    assert (again.pk, again.status) == (order.pk, Order.Status.PAID)  # a replay: the same order, paid once
    with pytest.raises(OrderNotPayable):
        order_pay(order=order, return_url="http://testserver/")  # nothing to pay: no checkout for 0.00
    assert provider.checkouts == []


def test_a_free_product_needs_no_voucher(make_variant, provider):
    mug = make_variant(sku="MUG", stock=10, price="0.00")

    order = order_place(email="ann@example.com", items=[{"sku": "MUG", "quantity": 2}], idempotency_key="k")

    assert_paid_for_free(order, mug=mug)


def test_the_api_answers_a_free_order_paid(free_mug, customer_client, provider):
    answer = place_api(customer_client, [{"sku": "MUG", "quantity": 2}], voucher="ALLFREE", key=uuid.uuid4().hex)

    assert answer.status_code == 201
    assert (answer.json()["status"], answer.json()["total"]) == ("paid", "0.00")
    assert_paid_for_free(Order.objects.get(), mug=free_mug["mug"], voucher=free_mug["voucher"])


def test_the_checkout_page_places_a_free_order_paid_and_offers_nothing_to_pay(client, free_mug, provider):
    add_to_cart(client, "MUG", 2)
    key = form_key(client.get("/checkout/").content.decode())

    placed = client.post(
        "/checkout/",
        {"idempotency_key": key, "email": "ann@example.com", "voucher": "allfree", "voucher_shown": "ALLFREE"},
    )

    order = Order.objects.get()
    assert placed["Location"] == f"/orders/{order.number}/"
    page = client.get(placed["Location"]).content.decode()
    assert 'data-testid="status">Paid<' in page and 'data-testid="pay"' not in page
    assert 'data-testid="total">€0.00<' in page
    assert_paid_for_free(order, mug=free_mug["mug"], voucher=free_mug["voucher"])
