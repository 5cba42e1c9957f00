"""Group commit on a hot SKU: the lock holder places the orders queued behind it in one transaction."""

import json
import time
from multiprocessing.pool import ThreadPool

import pytest

from core.errors import DomainError
from inventory import batching
from inventory.locks import lock_list
from orders import services
from orders.models import Order
from tests.conftest import assert_books_balance, stock_of
from tests.race import answers_of, batch_sizes_recorded, holding, queue_one_by_one, run_parallel

pytestmark = pytest.mark.django_db(transaction=True)


def _place_and_record_batches(key, quantity, batches_file):
    """Place one order, recording the size of every batch this process executes as the lock holder."""
    run = batching.batch_run

    def recording(batch_type, requests):
        with open(batches_file, "a") as out:
            out.write(json.dumps(len(requests)) + "\n")
        return run(batch_type, requests)

    batching.batch_run = recording
    try:
        order = services.order_place(
            email="b@example.com", items=[{"sku": "HOT", "quantity": quantity}], idempotency_key=key
        )
        return order.number
    except DomainError as exc:
        return exc.as_dict()
    except RuntimeError as exc:
        return {"code": "crashed", "detail": str(exc)}


def _queue_behind_held_lock(jobs, tmp_path, processes):
    """Hold HOT's lock until every buyer is queued, then let go: the first waiter serves everyone."""
    batches = tmp_path / "batches"
    jobs = [job | {"batches_file": str(batches)} for job in jobs]
    with holding(["HOT"]):
        pool = ThreadPool(1)
        pending = pool.apply_async(run_parallel, (_place_and_record_batches, jobs), {"processes": processes})
        deadline = time.monotonic() + 30
        while not any(lock["waiters"] == processes for lock in lock_list()) and time.monotonic() < deadline:
            time.sleep(0.02)
    results = pending.get(60)
    pool.close()
    sizes = [json.loads(line) for line in batches.read_text().splitlines()]
    return results, sizes


def test_orders_queued_behind_a_held_lock_are_placed_by_one_holder_in_one_batch(make_variant, tmp_path):
    hot = make_variant(sku="HOT", stock=100)
    jobs = [{"key": f"k{n}", "quantity": 1 + n % 3} for n in range(8)]

    results, batch_sizes = _queue_behind_held_lock(jobs, tmp_path, processes=8)

    assert batch_sizes == [8]  # one holder, one transaction, eight orders
    assert len(set(results)) == 8 and Order.objects.count() == 8
    ordered = sum(job["quantity"] for job in jobs)
    assert (stock_of(hot).on_hand, stock_of(hot).reserved) == (100, ordered)
    assert_books_balance(hot)


def _place(*, email, sku, key, quantity) -> dict:
    """What one buyer is told: its order's number, or the refusal."""
    try:
        order = services.order_place(email=email, items=[{"sku": sku, "quantity": quantity}], idempotency_key=key)
        return {"number": order.number}
    except DomainError as exc:
        return exc.as_dict()


def _buy(n, key, quantity, out):
    out.put((n, _place(email="b@example.com", sku="HOT", key=key, quantity=quantity)))


def _told(answer: dict) -> dict:
    """An answer comparable across products and buyers: an order by its key, shortages without the SKU."""
    told = {name: value for name, value in answer.items() if name not in ("number", "shortages")}
    if "number" in answer:
        told["order_with_key"] = Order.objects.get(number=answer["number"]).idempotency_key
    if "shortages" in answer:
        told["shortages"] = [(s["requested"], s["available"]) for s in answer["shortages"]]
    return told


@pytest.mark.parametrize(
    ("buyers", "codes"),
    [
        pytest.param(
            [("a", 3), ("b", 3), ("c", 2)],
            ["placed", "insufficient_stock", "placed"],
            id="a-small-order-fits-after-a-large-one-is-refused",
        ),
        pytest.param(
            [("a", 2), ("b", 4), ("a", 2), ("a", 1), ("c", 3), ("d", 1)],
            ["placed", "insufficient_stock", "placed", "idempotency_conflict", "placed", "insufficient_stock"],
            id="a-double-click-and-a-key-reused-for-another-order",
        ),
        pytest.param(
            [("a", 6), ("a", 1)],
            ["insufficient_stock", "placed"],
            id="a-key-refused-then-reused-for-an-order-that-fits",
        ),
        pytest.param(
            [("x", 3), ("a", 3), ("b", 2), ("a", 3)],
            ["placed", "insufficient_stock", "placed", "insufficient_stock"],
            id="a-double-click-on-a-refusal-is-refused-with-what-is-left-then",
        ),
    ],
)
def test_every_buyer_in_a_batch_is_told_what_it_would_be_told_alone(make_variant, monkeypatch, tmp_path, buyers, codes):
    """A batch served out of order, or stopping at its first refusal, tells some buyer something else."""
    hot, alone_variant = make_variant(sku="HOT", stock=5), make_variant(sku="ALONE", stock=5)
    batch_sizes = batch_sizes_recorded(monkeypatch, "place", tmp_path / "batches")

    jobs = [{"n": n, "key": key, "quantity": quantity} for n, (key, quantity) in enumerate(buyers)]
    processes, out = queue_one_by_one(_buy, jobs)
    batched = answers_of(processes, out, len(jobs))
    assert batch_sizes() == [len(jobs)]  # the first buyer served the others, in queue order, in one batch

    # The same buyers one at a time, in the same order, on the same stock.
    alone = [_place(email="alone@example.com", sku="ALONE", key=key, quantity=quantity) for key, quantity in buyers]
    assert [answer.get("code", "placed") for answer in alone] == codes

    assert [_told(batched[n]) for n in range(len(jobs))] == [_told(answer) for answer in alone]
    orders = {
        variant: sorted(o.idempotency_key for o in Order.objects.filter(lines__variant=variant))
        for variant in (hot, alone_variant)
    }
    assert orders[hot] == orders[alone_variant]
    assert stock_of(hot).reserved == stock_of(alone_variant).reserved
    assert_books_balance(hot, alone_variant)


def test_when_the_holders_batch_fails_its_waiters_place_their_orders_on_their_own(make_variant, tmp_path, monkeypatch):
    hot = make_variant(sku="HOT", stock=10)
    jobs = [{"key": f"k{n}", "quantity": 1} for n in range(4)]
    run = batching.batch_run

    def fail_once(batch_type, requests):
        if len(requests) > 1:
            raise RuntimeError("the holder's batch broke")
        return run(batch_type, requests)

    monkeypatch.setattr(batching, "batch_run", fail_once)  # inherited by the forked buyers

    results, batch_sizes = _queue_behind_held_lock(jobs, tmp_path, processes=4)

    # The holder's own order failed with its batch; the three it had taken placed theirs alone.
    assert batch_sizes[0] == 4 and sorted(batch_sizes[1:]) == [1, 1, 1]
    assert sum(isinstance(r, str) for r in results) == 3
    assert [r for r in results if isinstance(r, dict)] == [{"code": "crashed", "detail": "the holder's batch broke"}]
    assert Order.objects.count() == 3 and stock_of(hot).reserved == 3
    assert_books_balance(hot)


def test_the_order_a_batch_returns_is_complete_and_matches_the_database(make_variant):
    make_variant(sku="HOT", stock=5)

    order = services.order_place(email="b@example.com", items=[{"sku": "HOT", "quantity": 2}], idempotency_key="k")

    assert order.get_deferred_fields() == set()  # built from the inserted row: no lazy query later
    stored = Order.objects.get(pk=order.pk)
    for field in Order._meta.concrete_fields:
        assert getattr(order, field.attname) == getattr(stored, field.attname), field.name
