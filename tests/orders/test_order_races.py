"""Order state races with real processes on MariaDB + Redis."""

import random
from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from inventory.errors import DomainError
from inventory.models import Reservation, StockMovement
from orders.models import Order
from orders.services import order_expire, order_pay, order_place
from tests.conftest import assert_books_balance, stock_of
from tests.race import run_parallel, wait_for_peers

pytestmark = pytest.mark.django_db(transaction=True)


def _act(action, order_id):
    order = Order.objects.get(pk=order_id)
    try:
        if action == "pay":
            return order_pay(order=order).status
        return order_expire(order=order)
    except DomainError as exc:
        return exc.code


def test_pay_and_expire_hammered_on_the_same_orders_never_do_both(make_product):
    mug = make_product(sku="MUG", stock=60)
    orders = [
        order_place(email="x@example.com", items=[{"sku": "MUG", "quantity": 1 + i % 2}], idempotency_key=f"o{i}")
        for i in range(40)
    ]
    Order.objects.update(expires_at=timezone.now() - timedelta(seconds=1))  # all overdue: both actions are legal
    jobs = [{"action": action, "order_id": o.pk} for o in orders for action in ("pay", "expire", "pay", "expire")]
    random.Random(4).shuffle(jobs)

    results = run_parallel(_act, jobs, processes=8)

    assert all(r in ("paid", True, False) for r in results), Counter(map(str, results))
    for order in Order.objects.all():
        reservations = list(Reservation.objects.filter(order_line__order=order))
        states = Counter(r.state for r in reservations)
        assert order.status in (Order.Status.PAID, Order.Status.EXPIRED)
        assert states["active"] == 0
        if order.status == Order.Status.PAID:
            assert states["committed"] == 1  # paid directly, or re-reserved after losing to expiry
        else:
            assert states["committed"] == 0 and states["released"] == 1
        for reservation in reservations:
            kinds = sorted(reservation.movements.values_list("kind", flat=True))
            assert kinds in (["commit", "reserve"], ["release", "reserve"]), kinds  # never both
    sold = sum(line.quantity for o in Order.objects.filter(status="paid") for line in o.lines.all())
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (60 - sold, 0)
    assert_books_balance(mug)


def _place_same_key():
    wait_for_peers()
    return order_place(email="r@example.com", items=[{"sku": "MUG", "quantity": 2}], idempotency_key="replayed").pk


def test_the_same_order_fired_concurrently_is_placed_once(make_product):
    mug = make_product(sku="MUG", stock=10)

    order_ids = run_parallel(_place_same_key, [{}] * 12, processes=12, barrier=True)

    assert len(set(order_ids)) == 1
    assert Order.objects.count() == 1
    assert stock_of(mug).reserved == 2
    assert StockMovement.objects.filter(kind="reserve").count() == 1
    assert_books_balance(mug)
