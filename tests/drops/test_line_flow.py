"""A drop's line end to end, in one process: join, pass, admission as a hold, checkout, pay, sold out, back."""

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from drops import passes
from drops.errors import NotAdmitted
from inventory.models import Reservation
from orders.models import Order
from orders.services import drop_line_pass, order_hold_checkout, order_place
from orders.services.sweeps import order_release_expired
from tests.conftest import pay, stock_of

pytestmark = pytest.mark.django_db(transaction=True)


def join(client, drop, variant, email):
    response = client.post(f"/drops/{drop.pk}/", {"sku": variant.sku, "email": email, "quantity": "1"})
    assert response.status_code == 302, response.content
    return response


def test_join_wait_admit_check_out_pay(client, make_drop, settings):
    drop = make_drop(units=1)
    variant = drop.entries.get().variant
    drop_line_pass(drop=drop)  # the runner's first pass publishes the news
    join(client, drop, variant, "ann@example.com")
    waiting = client.get(f"/drops/{drop.pk}/")
    assert b"#1" in waiting.content and waiting["Refresh"]
    assert drop_line_pass(drop=drop).admitted == 1
    order = Order.objects.get()
    assert order.status == Order.Status.HELD and order.email == "ann@example.com"
    assert stock_of(variant).reserved == 1
    admitted = client.get(f"/drops/{drop.pk}/")
    assert b"You're in" in admitted.content
    page = client.get(f"/orders/{order.number}/checkout/")
    assert page.status_code == 200 and b"held for you" in page.content
    order = order_hold_checkout(order=order)
    assert order.status == Order.Status.AWAITING_PAYMENT
    assert pay(order).status == Order.Status.PAID
    stock = stock_of(variant)
    assert (stock.on_hand, stock.reserved) == (0, 0)


def test_an_order_outside_the_line_is_refused(make_drop, customer):
    drop = make_drop(units=3)
    variant = drop.entries.get().variant
    with pytest.raises(NotAdmitted) as refused:
        order_place(customer=customer, items=[{"sku": variant.sku, "quantity": 1}], idempotency_key="k")
    assert refused.value.payload["line"] == f"/api/drops/{drop.pk}/line/"
    assert stock_of(variant).reserved == 0


def test_a_lapsed_hold_goes_to_the_next_in_line(client, make_drop):
    drop = make_drop(units=1, window=10)
    variant = drop.entries.get().variant
    drop_line_pass(drop=drop)
    join(client, drop, variant, "first@example.com")
    second = Client()
    join(second, drop, variant, "second@example.com")
    assert drop_line_pass(drop=drop).admitted == 1
    assert drop_line_pass(drop=drop).state == "sold_out"
    assert b"Sold out for now" in second.get(f"/drops/{drop.pk}/").content
    Order.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    order_release_expired(batch_size=100)
    assert drop_line_pass(drop=drop).admitted == 1
    held = Order.objects.get(status=Order.Status.HELD)
    assert held.email == "second@example.com"
    assert Reservation.objects.filter(state=Reservation.State.ACTIVE).count() == 1
    assert b"You're in" in second.get(f"/drops/{drop.pk}/").content


def test_a_second_tab_gets_the_same_place(client, make_drop):
    drop = make_drop(units=5)
    variant = drop.entries.get().variant
    drop_line_pass(drop=drop)
    join(client, drop, variant, "ann@example.com")
    first = client.cookies[passes.cookie_name(drop.pk)].value
    join(client, drop, variant, "ann@example.com")
    assert client.cookies[passes.cookie_name(drop.pk)].value == first
