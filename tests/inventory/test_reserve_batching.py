"""stock_reserve on a hot SKU: buyers queued behind the lock are served by its holder, and what each
gets back is the reservation as stored, though the holder answers with only ids and a time."""

import time
from multiprocessing.pool import ThreadPool

import pytest

from inventory.errors import InsufficientStock
from inventory.locks import lock_list
from inventory.models import Reservation
from inventory.services import stock_adjust, stock_release, stock_reserve
from orders.models import Order
from orders.services import order_place
from tests.conftest import assert_books_balance, stock_of
from tests.race import answers_of, batch_sizes_recorded, holding, queue_one_by_one, run_parallel

pytestmark = pytest.mark.django_db(transaction=True)


def _reserve_order(order_id):
    order = Order.objects.prefetch_related("lines__variant").get(pk=order_id)
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


def test_reservations_a_batch_hands_back_match_the_stored_rows_field_for_field(make_variant):
    hot = make_variant(sku="HOT", stock=50)
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


def _reserve_queued(n, order_id, out):
    out.put((n, _reserve_or_refusal(order_id)))


def _orders_to_reserve(variant, quantities, *, available):
    """Orders of ``quantities`` of ``product`` with their lines but no reservation, and ``available`` units free."""
    orders = []
    for n, quantity in enumerate(quantities):
        items = [{"sku": variant.sku, "quantity": quantity}]
        order = order_place(email="b@example.com", items=items, idempotency_key=f"{variant.sku}{n}")
        stock_release(order=order, reason=Reservation.ReleaseReason.CANCELLED)  # lines kept, units back
        orders.append(order)
    stock_adjust(sku=variant.sku, set_to=available, reason="the units this test shares out")
    return orders


def _told(answer: dict) -> dict:
    """An answer comparable across products: shortages without the SKU."""
    told = {name: value for name, value in answer.items() if name != "shortages"}
    if "shortages" in answer:
        told["shortages"] = [(s["requested"], s["available"]) for s in answer["shortages"]]
    return told


def _active_reservations(order) -> list[int]:
    return [r.quantity for r in Reservation.objects.filter(order_line__order=order, state=Reservation.State.ACTIVE)]


@pytest.mark.parametrize(
    ("quantities", "codes"),
    [
        pytest.param(
            [3, 3, 2], ["reserved", "insufficient_stock", "reserved"], id="a-small-order-fits-after-a-large-one"
        ),
        pytest.param(
            [3, 4, 2, 1],
            ["reserved", "insufficient_stock", "reserved", "insufficient_stock"],
            id="each-refused-with-what-was-left-then",
        ),
    ],
)
def test_every_order_in_a_batch_is_reserved_or_refused_as_it_would_be_alone(
    make_variant, monkeypatch, tmp_path, quantities, codes
):
    """A batch served out of order, or stopping at its first refusal, answers some order differently."""
    hot = make_variant(sku="HOT", stock=sum(quantities))
    alone_variant = make_variant(sku="ALONE", stock=sum(quantities))
    orders, alone_orders = (_orders_to_reserve(p, quantities, available=5) for p in (hot, alone_variant))
    batch_sizes = batch_sizes_recorded(monkeypatch, "reserve", tmp_path / "batches")

    processes, out = queue_one_by_one(_reserve_queued, [{"n": n, "order_id": o.pk} for n, o in enumerate(orders)])
    answers = answers_of(processes, out, len(orders))
    batched = [answers[n] for n in range(len(orders))]
    assert batch_sizes() == [len(orders)]  # the first order's buyer reserved for all, in queue order, in one batch

    # The same orders one at a time, in the same order, on the same stock.
    alone = [_reserve_or_refusal(order.pk) for order in alone_orders]
    assert [answer.get("code", "reserved") for answer in alone] == codes

    assert [_told(answer) for answer in batched] == [_told(answer) for answer in alone]
    # What each was told is what is stored: the refused have no rows (the batch's first, refused try
    # at reserving everything was rolled back with its rows).
    for order, answer in zip(orders, batched, strict=True):
        assert _active_reservations(order) == answer.get("reserved", [])
    assert stock_of(hot).reserved == stock_of(alone_variant).reserved
    assert_books_balance(hot, alone_variant)
