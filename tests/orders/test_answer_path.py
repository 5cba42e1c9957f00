"""A buyer served by a lock holder is told the truth: its order, a definite refusal, or "outcome
unknown, retry with the same key", never "nothing changed" for an order that exists. Default lock
settings throughout: the answer path must hold with the TTL and socket timeouts users run."""

import os
import time
from datetime import timedelta

import pytest
from django.conf import settings
from django.core.cache import caches
from django.db import connections
from django.utils import timezone

from core.errors import DomainError
from inventory import batching
from inventory.locks.queue import QueuedLock
from orders import services
from orders.models import Order
from tests.conftest import assert_books_balance, assert_told_their_orders, stock_of
from tests.race import answers_of, queue_one_by_one

pytestmark = pytest.mark.django_db(transaction=True)


def _buy(key, quantity, out):
    connections.close_all()
    try:
        order = services.order_place(
            email="b@example.com", items=[{"sku": "HOT", "quantity": quantity}], idempotency_key=key
        )
        out.put((key, {"number": order.number}))
    except DomainError as exc:
        out.put((key, exc.as_dict()))


def _slow_batches(seconds, started=None):
    """Patch order placement so a holder serving others spends ``seconds`` before its commit (and
    creates the file ``started`` when it begins to)."""
    run = batching.batch_run

    def slow(batch_type, requests):
        results = run(batch_type, requests)
        if len(requests) > 1:
            if started:
                started.touch()
            time.sleep(seconds)
        return results

    return slow


def test_a_served_buyer_gets_its_order_from_a_holder_slower_than_the_socket_timeout(make_variant, monkeypatch):
    hot = make_variant(sku="HOT", stock=10)
    socket_timeout = settings.CACHES[settings.LOCK_CACHE_ALIAS]["OPTIONS"]["SOCKET_TIMEOUT"]
    assert socket_timeout < settings.LOCK_TTL_SECONDS  # the defaults this test is about
    monkeypatch.setattr(batching, "batch_run", _slow_batches(socket_timeout + 2))

    # The served buyer has queued for most of its wait when the holder takes its request, and the
    # holder then works longer than a socket timeout, well within its lock's TTL.
    buyers, out = queue_one_by_one(
        _buy,
        [{"key": "holder", "quantity": 1}, {"key": "served", "quantity": 2}],
        hold_after=settings.LOCK_WAIT_SECONDS - 0.5,
    )
    answers = answers_of(buyers, out, 2)

    assert_told_their_orders(answers, ["holder", "served"])
    assert stock_of(hot).reserved == 3
    assert_books_balance(hot)


def test_a_holder_killed_between_its_commit_and_its_answers_still_gets_every_buyer_their_order(
    make_variant, monkeypatch
):
    hot = make_variant(sku="HOT", stock=10)
    monkeypatch.setattr(QueuedLock, "answer", lambda lock, answers: os._exit(9) if answers else None)

    buyers, out = queue_one_by_one(_buy, [{"key": f"k{n}", "quantity": 1} for n in range(4)])
    for buyer in buyers:
        buyer.join(60)

    # The first buyer placed all four in one commit and died before answering. The others waited
    # as long as it could still have committed, heard nothing and found their order by its key.
    assert [buyer.exitcode for buyer in buyers] == [9, 0, 0, 0]
    answers = dict(out.get(timeout=5) for _ in range(3))
    placed = dict(Order.objects.values_list("idempotency_key", "number"))
    assert sorted(placed) == ["k0", "k1", "k2", "k3"]
    assert answers == {key: {"number": placed[key]} for key in ["k1", "k2", "k3"]}
    assert stock_of(hot).reserved == 4
    assert_books_balance(hot)


def _waiting_connections(redis_client):
    """Connections to our Redis database blocked in BLPOP: buyers waiting for a hand-off or an answer."""
    db = str(redis_client.connection_pool.connection_kwargs.get("db", 0))
    return [client for client in redis_client.client_list() if "b" in client["flags"] and client["db"] == db]


def test_a_served_buyer_whose_redis_connection_drops_while_it_waits_still_gets_its_order(
    make_variant, monkeypatch, tmp_path
):
    hot = make_variant(sku="HOT", stock=10)
    serving = tmp_path / "serving"
    monkeypatch.setattr(batching, "batch_run", _slow_batches(3, started=serving))
    redis_client = caches[settings.LOCK_CACHE_ALIAS].client.get_client(write=True)

    buyers, out = queue_one_by_one(_buy, [{"key": "holder", "quantity": 1}, {"key": "served", "quantity": 1}])
    deadline = time.monotonic() + 10
    while not serving.exists() or not (waiting := _waiting_connections(redis_client)):
        assert time.monotonic() < deadline, "the served buyer never waited for its answer"
        time.sleep(0.05)
    for client in waiting:
        redis_client.client_kill_filter(_id=client["id"])
    answers = answers_of(buyers, out, 2)

    assert_told_their_orders(answers, ["holder", "served"])
    assert stock_of(hot).reserved == 2
    assert_books_balance(hot)


def test_a_batch_that_expires_an_overdue_order_still_serves_in_queue_order(make_variant):
    hot = make_variant(sku="HOT", stock=4)
    overdue = services.order_place(email="o@example.com", items=[{"sku": "HOT", "quantity": 1}], idempotency_key="o")
    Order.objects.filter(pk=overdue.pk).update(expires_at=timezone.now() - timedelta(minutes=1))

    # Alone, A (4) gets every unit once the overdue order is expired, and B (3) then finds none.
    buyers, out = queue_one_by_one(_buy, [{"key": "A", "quantity": 4}, {"key": "B", "quantity": 3}])
    answers = answers_of(buyers, out, 2)

    assert answers["A"] == {"number": Order.objects.get(idempotency_key="A").number}
    assert answers["B"]["code"] == "insufficient_stock"
    assert answers["B"]["shortages"] == [{"sku": "HOT", "requested": 3, "available": 0}]
    assert Order.objects.get(pk=overdue.pk).status == Order.Status.EXPIRED
    assert stock_of(hot).reserved == 4
    assert_books_balance(hot)
