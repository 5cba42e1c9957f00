"""Redis fails under the shop. While it is away orders go on under the stock rows' locks in the
database (or, with LOCK_DB_FALLBACK off, get a clear 503 and nothing is reserved); the shop goes back
to Redis's locks by itself when it is back. A Redis crash mid-load (every lock gone at once) cannot
oversell, because the database's guarded UPDATE decides, not the lock."""

import multiprocessing
import os
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import connections
from django.utils import timezone

from core.errors import DomainError
from inventory import batching
from inventory.errors import InsufficientStock, LockTimeout, LockUnavailable
from inventory.models import Reservation
from orders.models import Order
from orders.services import order_place, order_release_expired
from tests.conftest import assert_told_their_orders, pay, stock_of
from tests.faults.conftest import assert_books, buyer_over_http, row_locked
from tests.processes import RedisServer, app_server, http, process_env, wait_for
from tests.race import answers_of, queue_one_by_one, run_parallel, wait_for_peers

pytestmark = pytest.mark.django_db(transaction=True)


def test_without_the_fallback_orders_get_a_503_while_redis_is_down_and_go_through_once_it_is_back(
    make_variant, token, tmp_path
):
    mug = make_variant(sku="MUG", stock=50)
    with RedisServer(tmp_path) as redis:
        env = process_env(
            REDIS_URL=redis.url, CELERY_BROKER_URL=redis.url, ORDER_THROTTLE_RATE="100000/minute", LOCK_DB_FALLBACK="0"
        )
        with app_server(env, tmp_path / "gunicorn.log", workers=2) as (url, _):

            def order(key):
                body = {"items": [{"sku": "MUG", "quantity": 1}]}
                return http("POST", f"{url}/api/orders/", token=token, body=body, key=key)

            assert order("before")[0] == 201
            redis.kill()
            during = [order(f"during-{n}") for n in range(6)]
            reserved_during, orders_during = stock_of(mug).reserved, Order.objects.count()
            redis.start()  # the same address; the shop is not restarted
            after = order("after")
            retried = [order(f"during-{n}") for n in range(6)]  # the buyers' retries, same keys

    for status, body, headers in during:
        assert (status, body["code"]) == (503, "lock_unavailable"), body
        assert int(headers["Retry-After"]) > 0
        assert "Traceback" not in str(body)
    assert reserved_during == 1 == orders_during  # nothing was reserved while Redis was down
    assert after[0] == 201
    assert [status for status, _, _ in retried] == [201] * 6
    assert stock_of(mug).reserved == 8 == Order.objects.count()
    assert_books(mug)


def _sections_watched(gate, stalled, windows):
    """Pace every batch of orders and note its window (start, end) in ``windows``.

    A batch runs inside its stock section, so two windows that overlap are two sections at once. While
    ``gate`` is shut a batch waits at it, inside its section and before its guarded write, and adds its
    pid to ``stalled``.
    """
    run = batching.batch_run

    def run_watched(batch_type, requests):
        started = time.monotonic()
        if not gate.is_set():
            stalled.append(os.getpid())
            gate.wait(60)
        time.sleep(0.05)
        try:
            return run(batch_type, requests)
        finally:
            windows.append((started, time.monotonic()))

    batching.batch_run = run_watched


def _buyer(deadline, gate, buying, stalled):
    """Buy one unit at a time until sold out; retry a busy or unreachable lock with the same key, and
    try nothing while ``buying`` is shut.

    Returns the order number told per key, the key refused for want of stock, the codes retried on and
    the windows of the sections this process held.
    """
    windows = []
    _sections_watched(gate, stalled, windows)
    wait_for_peers()
    told, retries, key = {}, [], None
    while time.monotonic() < deadline:
        buying.wait(60)
        key = key or f"{os.getpid()}-{len(told)}"
        try:
            order = order_place(email="b@example.com", items=[{"sku": "MUG", "quantity": 1}], idempotency_key=key)
        except (LockUnavailable, LockTimeout) as exc:
            retries.append(exc.code)
            time.sleep(0.02)
            continue
        except InsufficientStock:
            return told, key, retries, windows
        told[key] = order.number
        key = None
    return told, None, retries, windows


def _newcomer(quantity, gate, stalled):
    """One order for ``quantity`` units under a key of its own; returns what ``_buyer`` does."""
    windows = []
    _sections_watched(gate, stalled, windows)
    key, items = f"newcomer-{os.getpid()}", [{"sku": "MUG", "quantity": quantity}]
    try:
        order = order_place(email="b@example.com", items=items, idempotency_key=key)
    except InsufficientStock:
        return {}, key, [], windows
    return {key: order.number}, None, [], windows


def test_a_redis_crash_just_before_sell_out_cannot_oversell(make_variant, private_redis_settings, settings):
    """Redis is killed and restarted twice mid-load, the second time with a third of the units left.

    Each time a section is kept open across the crash, the crowd holds back, and a newcomer locks afresh
    on the empty Redis and opens its own section: two at once. The second time the newcomer asks for
    every unit left, so the two ask for more than there is and only the guarded UPDATE stops an oversell.
    (Without the row-lock fallback, so that every section after the crash locks on the new Redis.)
    """
    settings.LOCK_DB_FALLBACK = False
    redis, stock = private_redis_settings, 60
    mug = make_variant(sku="MUG", stock=stock)
    crashes, newcomers = [], []
    connections.close_all()  # the manager's process must not share this process's connection
    with multiprocessing.get_context("fork").Manager() as shared, ThreadPoolExecutor(3) as background:
        gate, buying, stalled = shared.Event(), shared.Event(), shared.list()
        gate.set()
        buying.set()
        job = {"deadline": time.monotonic() + 60, "gate": gate, "buying": buying, "stalled": stalled}
        buyers = background.submit(run_parallel, _buyer, [job] * 8, processes=8, barrier=True)
        try:
            # The second crash comes with a third of the units left: a batch or two may sell between the
            # check and the gate, and a section must still find units to write when it stops there.
            for threshold, takes_all in ((stock // 2, False), (stock // 3, True)):
                while not buyers.done() and stock_of(mug).available > threshold:
                    time.sleep(0.01)
                stalled[:] = []
                gate.clear()
                wait_for(lambda: len(stalled) == 1, timeout=30, what="a section to stop at the gate")
                buying.clear()  # the crowd's next tries wait: the newcomer is the first on the new Redis
                available = stock_of(mug).available
                crashes.append((time.monotonic(), available))
                redis.kill()
                redis.start()
                newcomer = {"quantity": available if takes_all else 1, "gate": gate, "stalled": stalled}
                newcomers.append(background.submit(run_parallel, _newcomer, [newcomer], processes=1))
                wait_for(lambda: len(stalled) == 2, timeout=30, what="the newcomer's section beside the open one")
                gate.set()
                buying.set()
        finally:
            gate.set()
            buying.set()
        crowd = buyers.result()
        results = crowd + [result for newcomer in newcomers for result in newcomer.result()]

    told = {key: number for numbers, _, _, _ in results for key, number in numbers.items()}
    retries = [code for _, _, codes, _ in results for code in codes]
    windows = [window for _, _, _, held in results for window in held]
    overlaps = {(a, b) for a in windows for b in windows if a[0] < b[0] < a[1]}
    # A section begun after a crash locked on the new Redis: the one open at the crash held the old lock.
    across = [{(a, b) for a, b in overlaps if a[0] < killed < b[0]} for killed, _ in crashes]
    assert all(0 < available <= stock // 2 for _, available in crashes), crashes  # both crashes hit mid-load
    assert all(across)  # at each crash a section begun before it ran beside one begun after it
    assert overlaps == set().union(*across)  # and only then: between crashes the lock kept sections apart
    assert retries  # buyers did see the lock service fail, and retried their keys
    assert all(refused for _, refused, _, _ in crowd)  # the crowd kept buying until sold out
    assert_told_their_orders({key: {"number": number} for key, number in told.items()}, list(told))
    assert stock_of(mug).reserved == stock
    assert_books(mug)


def _buy_hot(key, out):
    try:
        order = order_place(email="b@example.com", items=[{"sku": "HOT", "quantity": 1}], idempotency_key=key)
        out.put((key, {"number": order.number}))
    except DomainError as exc:
        out.put((key, exc.as_dict()))


def test_a_buyer_whose_request_was_taken_when_redis_died_is_told_the_outcome_is_unknown(
    make_variant, private_redis_settings, monkeypatch, tmp_path
):
    """Redis crashes after a holder took a waiter's request and before it answered: the waiter cannot
    learn what happened, so it must not be told that nothing changed; the holder commits its order."""
    hot, serving = make_variant(sku="HOT", stock=10), tmp_path / "serving"
    run = batching.batch_run

    def serve_slowly(batch_type, requests):
        if len(requests) > 1:
            serving.touch()
            time.sleep(2)  # Redis dies meanwhile
        return run(batch_type, requests)

    monkeypatch.setattr(batching, "batch_run", serve_slowly)  # inherited by the forked buyers

    buyers, out = queue_one_by_one(_buy_hot, [{"key": "holder"}, {"key": "waiter"}])
    wait_for(serving.exists, timeout=20, what="the holder to take the waiter's request")
    private_redis_settings.kill()
    answers = answers_of(buyers, out, 2)

    assert answers["waiter"]["code"] == "lock_timeout" and answers["waiter"]["outcome"] == "unknown"
    placed = dict(Order.objects.values_list("idempotency_key", "number"))
    assert answers["holder"] == {"number": placed["holder"]} and "waiter" in placed  # it was placed after all
    assert stock_of(hot).reserved == 2
    assert_books(hot)


def test_orders_go_on_under_the_rows_locks_while_redis_is_down_and_back_on_its_locks_after(
    make_variant, token, tmp_path
):
    """Six buyers over HTTP, three gunicorn workers: Redis is killed with a third sold and restarted with
    two thirds sold, so a third of the stock sells under the rows' locks alone; every unit is sold once.
    The workers ask Redis again every 0.1 s, so the last third (some seconds of selling) is time enough."""
    stock = 210
    mug = make_variant(sku="MUG", stock=stock)
    log = tmp_path / "gunicorn.log"
    with RedisServer(tmp_path) as redis:
        env = process_env(
            REDIS_URL=redis.url,
            CELERY_BROKER_URL=redis.url,
            ORDER_THROTTLE_RATE="100000/minute",
            LOCK_OUTAGE_RETRY_SECONDS="0.1",
        )
        with app_server(env, log, workers=3) as (url, _), ThreadPoolExecutor(1) as background:
            jobs = [{"url": url, "token": token, "name": f"buyer{n}"} for n in range(6)]
            buyers = background.submit(run_parallel, buyer_over_http, jobs, processes=len(jobs))
            wait_for(lambda: stock_of(mug).reserved >= stock // 3, timeout=60, what="a third sold")
            redis.kill()
            at_kill = stock_of(mug).reserved
            wait_for(lambda: stock_of(mug).reserved >= 2 * stock // 3, timeout=60, what="orders with Redis down")
            at_restart = stock_of(mug).reserved
            redis.start()
            results = buyers.result()

    told = {key: {"number": number} for numbers, _, _ in results for key, number in numbers.items()}
    retried = [code for _, _, codes in results for code, _ in codes]
    lines = log.read_text()
    assert at_kill < stock // 2 and at_restart - at_kill >= stock // 6  # sold with Redis down, no lock service
    assert "selling under the database's row locks" in lines
    assert "answers again" in lines  # and back on Redis's locks once it answered
    assert set(retried) <= {"lock_timeout"}  # an answer lost with Redis: retried, same key
    assert all(refused for _, refused, _ in results)  # every buyer kept buying until sold out
    assert_told_their_orders(told, list(told))
    assert len(told) == stock == stock_of(mug).reserved
    assert_books(mug)


def test_payments_and_sweeps_lock_the_rows_while_redis_is_down(make_variant, private_redis_settings, celery_eager):
    """What else takes the stock lock (paying, the expiry sweep) follows the same rule as placing."""
    mug = make_variant(sku="MUG", stock=5)
    paying = order_place(email="b@example.com", items=[{"sku": "MUG", "quantity": 2}], idempotency_key="paying")
    overdue = order_place(email="b@example.com", items=[{"sku": "MUG", "quantity": 3}], idempotency_key="overdue")
    Order.objects.filter(pk=overdue.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    Reservation.objects.filter(order_line__order=overdue).update(expires_at=timezone.now() - timedelta(seconds=1))
    private_redis_settings.kill()

    paid = pay(paying)
    swept = order_release_expired(batch_size=10)
    again = order_place(email="b@example.com", items=[{"sku": "MUG", "quantity": 3}], idempotency_key="again")

    assert paid.status == Order.Status.PAID
    assert (swept.done, swept.units) == (1, 3)
    assert Order.objects.get(pk=overdue.pk).status == Order.Status.EXPIRED
    assert again.status == Order.Status.AWAITING_PAYMENT
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (3, 3)  # 2 sold, 3 held again
    assert_books(mug)


def test_under_the_rows_locks_a_buyer_waits_for_a_held_row_no_longer_than_the_lock_wait(
    make_variant, private_redis_settings, settings
):
    """The rows' locks are real and bounded: a stock row held by another transaction makes an order wait
    for it, then refuses it ``lock_timeout`` with nothing changed."""
    settings.LOCK_WAIT_SECONDS = 1
    mug = make_variant(sku="MUG", stock=5)
    private_redis_settings.kill()
    started = time.monotonic()
    with row_locked(stock_of(mug)), pytest.raises(LockTimeout) as refused:
        order_place(email="b@example.com", items=[{"sku": "MUG", "quantity": 1}], idempotency_key="waits")
    waited = time.monotonic() - started

    assert refused.value.code == "lock_timeout" and 1 <= waited < 10
    assert Order.objects.count() == 0 and stock_of(mug).reserved == 0
    order_place(email="b@example.com", items=[{"sku": "MUG", "quantity": 1}], idempotency_key="after")
    assert stock_of(mug).reserved == 1
    assert_books(mug)
