"""One way to write money and one to write a moment, on every page and in every email (core.formats)."""

from datetime import UTC, datetime

import pytest
from django.template.loader import render_to_string

from orders.models import Order
from orders.services import order_place
from shop.errors import SaleNotStarted
from tests.conftest import pay

pytestmark = pytest.mark.django_db

MOMENT = datetime(2026, 3, 3, 9, 5, tzinfo=UTC)
MOMENT_SHOWN = "3 Mar 2026, 09:05 UTC"


@pytest.fixture
def paid(make_variant, customer):
    make_variant(sku="MUG", name="Logo mug", stock=10, price="354.50")
    order = pay(order_place(customer=customer, items=[{"sku": "MUG", "quantity": 1}], idempotency_key="k-1"))
    Order.objects.filter(pk=order.pk).update(paid_at=MOMENT, expires_at=MOMENT, created_at=MOMENT)
    return Order.objects.get(pk=order.pk)


def test_the_order_page_and_the_order_emails_write_a_moment_the_same_way(client, customer, paid):
    client.force_login(customer)

    page = client.get(f"/orders/{paid.number}/").content.decode()
    mine = client.get("/orders/").content.decode()
    emails = {
        f"{kind}.{ext}": render_to_string(f"orders/email/{kind}.{ext}", {"order": paid, "lines": [], "link": "-"})
        for kind in ("placed", "paid", "expired")
        for ext in ("txt", "html")
    }

    assert f"Paid: {MOMENT_SHOWN}" in page
    assert MOMENT_SHOWN in mine
    for name, body in emails.items():
        assert MOMENT_SHOWN in body, (name, body)


def test_a_sale_that_has_not_opened_says_when_it_opens_the_same_way(client, make_variant):
    make_variant(sku="DROP", name="Drop", stock=5, sale_starts_at=datetime(2099, 3, 3, 9, 5, tzinfo=UTC))

    page = client.get("/products/DROP/").content.decode()

    assert "Opens at <time" in page and "3 Mar 2099, 09:05 UTC</time>" in page


def test_the_admins_refund_page_writes_money_as_the_pages_do(staff_admin, paid):
    page = staff_admin.get(f"/admin/orders/order/{paid.pk}/refund/").content.decode()

    assert "€0.00\nof €354.50 refunded so far" in page or "€0.00 of €354.50 refunded so far" in page
    assert "EUR" not in page.split("refunded so far")[0].rsplit("<p>", 1)[-1]


def test_a_refusal_before_a_sale_opens_says_when_as_the_pages_do():
    refusal = SaleNotStarted(sku="DROP", starts_at=MOMENT.isoformat())

    assert refusal.explain() == f"The sale of DROP opens at {MOMENT_SHOWN}."
