"""stock_reserve on a hot SKU: buyers queued behind the lock are served by its holder, and what each
gets back is the reservation as stored, though the holder answers with only ids and a time."""

import time
from multiprocessing.pool import ThreadPool

import pytest

from inventory.errors import InsufficientStock
from inventory.locks import lock_list
from inventory.models import Reservation
from inventory.services import stock_release, stock_reserve
from orders.models import Order
from orders.services import order_place
from tests.conftest import assert_books_balance, stock_of
from tests.race import holding, run_parallel

pytestmark = pytest.mark.django_db(transaction=True)


def _reserve_order(order_id):
    order = Order.objects.prefetch_related("lines__product").get(pk=order_id)
    return stock_reserve(order=order, expires_at=order.expires_at)


def _reserve(order_id):
    return [
        {field.attname: getattr(r, field.attname) for field in Reservation._meta.concrete_fields}
        | {"deferred": sorted(r.get_deferred_fields())}
        for r in _reserve_order(order_id)
    ]


def _reserve_or_refusal(order_id):
    try:
        return {"reserved": [r.quantity for r in _reserve_order(order_id)]}
    except InsufficientStock as exc:
        return exc.as_dict()


def _queued_behind_held_lock(reserve, orders):
    """Hold HOT's lock until a process per order is queued, then let go: the first waiter serves the rest."""
    with holding(["HOT"]):
        pool = ThreadPool(1)
        jobs = [{"order_id": o.pk} for o in orders]
        pending = pool.apply_async(run_parallel, (reserve, jobs), {"processes": len(orders)})
        deadline = time.monotonic() + 30
        while not any(lock["waiters"] == len(orders) for lock in lock_list()) and time.monotonic() < deadline:
            time.sleep(0.02)
    results = pending.get(60)
    pool.close()
    return results


def test_reservations_a_batch_hands_back_match_the_stored_rows_field_for_field(make_product):
    hot = make_product(sku="HOT", stock=50)
    orders = []
    for n in range(6):
        items = [{"sku": "HOT", "quantity": 1 + n % 2}]
        order = order_place(email="b@example.com", items=items, idempotency_key=f"k{n}")
        stock_release(order=order, reason=Reservation.ReleaseReason.CANCELLED)  # lines kept, units back
        orders.append(order)

    results = _queued_behind_held_lock(_reserve, orders)

    assert len({r["created_at"] for result in results for r in result}) == 1  # one batch, one INSERT
    for order, returned in zip(orders, results, strict=True):
        stored = Reservation.objects.filter(order_line__order=order, state=Reservation.State.ACTIVE)
        assert returned == [
            {field.attname: getattr(r, field.attname) for field in Reservation._meta.concrete_fields} | {"deferred": []}
            for r in stored
        ]
    assert stock_of(hot).reserved == sum(1 + n % 2 for n in range(6))
    assert_books_balance(hot)


def test_a_batch_the_stock_cannot_cover_reserves_whole_orders_and_leaves_no_rows_for_the_refused(make_product):
    hot = make_product(sku="HOT", stock=12)
    orders = []
    for n in range(6):
        order = order_place(email="b@example.com", items=[{"sku": "HOT", "quantity": 2}], idempotency_key=f"k{n}")
        stock_release(order=order, reason=Reservation.ReleaseReason.CANCELLED)
        orders.append(order)
    order_place(email="c@example.com", items=[{"sku": "HOT", "quantity": 7}], idempotency_key="big")  # 5 left

    results = _queued_behind_held_lock(_reserve_or_refusal, orders)

    assert results.count({"reserved": [2]}) == 2  # two whole orders fit in 5
    refused = [r for r in results if "code" in r]
    assert len(refused) == 4
    assert all(r["code"] == "insufficient_stock" and r["shortages"][0]["available"] == 1 for r in refused)
    assert stock_of(hot).reserved == 7 + 4
    assert Reservation.objects.filter(order_line__order__in=orders, state=Reservation.State.ACTIVE).count() == 2
    assert_books_balance(hot)  # the rows of the first, refused try were rolled back with it
