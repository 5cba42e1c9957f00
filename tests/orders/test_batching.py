"""Group commit on a hot SKU: the lock holder places the orders queued behind it in one transaction."""

import json
import time
from multiprocessing.pool import ThreadPool

import pytest

from inventory.errors import DomainError
from inventory.locks import lock_list
from orders import services
from orders.models import Order
from tests.conftest import assert_books_balance, stock_of
from tests.race import holding, run_parallel

pytestmark = pytest.mark.django_db(transaction=True)


def _place_and_record_batches(key, quantity, batches_file):
    """Place one order, recording the size of every batch this process executes as the lock holder."""
    execute = services._orders_place_batch

    def recording(requests):
        with open(batches_file, "a") as out:
            out.write(json.dumps(len(requests)) + "\n")
        return execute(requests)

    services._orders_place_batch = recording
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


def test_orders_queued_behind_a_held_lock_are_placed_by_one_holder_in_one_batch(make_product, tmp_path):
    hot = make_product(sku="HOT", stock=100)
    jobs = [{"key": f"k{n}", "quantity": 1 + n % 3} for n in range(8)]

    results, batch_sizes = _queue_behind_held_lock(jobs, tmp_path, processes=8)

    assert batch_sizes == [8]  # one holder, one transaction, eight orders
    assert len(set(results)) == 8 and Order.objects.count() == 8
    ordered = sum(job["quantity"] for job in jobs)
    assert (stock_of(hot).on_hand, stock_of(hot).reserved) == (100, ordered)
    assert_books_balance(hot)


def test_a_batch_that_runs_out_serves_in_queue_order_and_refuses_the_rest_with_what_was_left(make_product, tmp_path):
    hot = make_product(sku="HOT", stock=5)
    jobs = [{"key": f"k{n}", "quantity": 2} for n in range(6)]

    results, batch_sizes = _queue_behind_held_lock(jobs, tmp_path, processes=6)

    assert batch_sizes == [6]
    placed = [r for r in results if isinstance(r, str)]
    refused = [r for r in results if isinstance(r, dict)]
    assert len(placed) == 2 and len(refused) == 4
    for refusal in refused:
        assert refusal["code"] == "insufficient_stock"
        assert refusal["shortages"] == [{"sku": "HOT", "requested": 2, "available": 1}]
    assert (stock_of(hot).on_hand, stock_of(hot).reserved) == (5, 4)
    assert_books_balance(hot)


def test_a_double_click_inside_one_batch_places_one_order(make_product, tmp_path):
    hot = make_product(sku="HOT", stock=10)
    jobs = [{"key": "same", "quantity": 1} for _ in range(4)] + [{"key": "other", "quantity": 1}]

    results, batch_sizes = _queue_behind_held_lock(jobs, tmp_path, processes=5)

    assert batch_sizes == [5]
    assert len({r for r, job in zip(results, jobs, strict=True) if job["key"] == "same"}) == 1
    assert Order.objects.count() == 2
    assert stock_of(hot).reserved == 2
    assert_books_balance(hot)


def test_when_the_holders_batch_fails_its_waiters_place_their_orders_on_their_own(make_product, tmp_path, monkeypatch):
    hot = make_product(sku="HOT", stock=10)
    jobs = [{"key": f"k{n}", "quantity": 1} for n in range(4)]
    failing = services._orders_place_batch

    def fail_once(requests):
        if len(requests) > 1:
            raise RuntimeError("the holder's batch broke")
        return failing(requests)

    monkeypatch.setattr(services, "_orders_place_batch", fail_once)  # inherited by the forked buyers

    results, batch_sizes = _queue_behind_held_lock(jobs, tmp_path, processes=4)

    # The holder's own order failed with its batch; the three it had taken placed theirs alone.
    assert batch_sizes[0] == 4 and sorted(batch_sizes[1:]) == [1, 1, 1]
    assert sum(isinstance(r, str) for r in results) == 3
    assert [r for r in results if isinstance(r, dict)] == [{"code": "crashed", "detail": "the holder's batch broke"}]
    assert Order.objects.count() == 3 and stock_of(hot).reserved == 3
    assert_books_balance(hot)


def test_the_order_a_batch_returns_is_complete_and_matches_the_database(make_product):
    make_product(sku="HOT", stock=5)

    order = services.order_place(email="b@example.com", items=[{"sku": "HOT", "quantity": 2}], idempotency_key="k")

    assert order.get_deferred_fields() == set()  # built from the inserted row: no lazy query later
    stored = Order.objects.get(pk=order.pk)
    for field in Order._meta.concrete_fields:
        assert getattr(order, field.attname) == getattr(stored, field.attname), field.name
