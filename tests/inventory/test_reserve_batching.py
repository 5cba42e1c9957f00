"""stock_reserve on a hot SKU: buyers queued behind the lock are served by its holder, and what each
gets back is the reservation as stored, though the holder answers with only ids and a time."""

import time
from multiprocessing.pool import ThreadPool

import pytest

from inventory.locks import lock_list
from inventory.models import Reservation
from inventory.services import stock_release, stock_reserve
from orders.models import Order
from orders.services import order_place
from tests.conftest import assert_books_balance, stock_of
from tests.race import holding, run_parallel

pytestmark = pytest.mark.django_db(transaction=True)


def _reserve(order_id):
    order = Order.objects.prefetch_related("lines__product").get(pk=order_id)
    reservations = stock_reserve(order=order, expires_at=order.expires_at)
    return [
        {field.attname: getattr(r, field.attname) for field in Reservation._meta.concrete_fields}
        | {"deferred": sorted(r.get_deferred_fields())}
        for r in reservations
    ]


def test_reservations_a_batch_hands_back_match_the_stored_rows_field_for_field(make_product):
    hot = make_product(sku="HOT", stock=50)
    orders = []
    for n in range(6):
        items = [{"sku": "HOT", "quantity": 1 + n % 2}]
        order = order_place(email="b@example.com", items=items, idempotency_key=f"k{n}")
        stock_release(order=order, reason=Reservation.ReleaseReason.CANCELLED)  # lines kept, units back
        orders.append(order)

    with holding(["HOT"]):  # everyone queues; the first waiter then serves the rest in one batch
        pool = ThreadPool(1)
        pending = pool.apply_async(run_parallel, (_reserve, [{"order_id": o.pk} for o in orders]), {"processes": 6})
        deadline = time.monotonic() + 30
        while not any(lock["waiters"] == 6 for lock in lock_list()) and time.monotonic() < deadline:
            time.sleep(0.02)
    results = pending.get(60)
    pool.close()

    assert len({r["created_at"] for result in results for r in result}) == 1  # one batch, one INSERT
    for order, returned in zip(orders, results, strict=True):
        stored = Reservation.objects.filter(order_line__order=order, state=Reservation.State.ACTIVE)
        assert returned == [
            {field.attname: getattr(r, field.attname) for field in Reservation._meta.concrete_fields} | {"deferred": []}
            for r in stored
        ]
    assert stock_of(hot).reserved == sum(1 + n % 2 for n in range(6))
    assert_books_balance(hot)
