import logging
import multiprocessing
import os
import signal
import threading
import time

import pytest
import redis
from django.conf import settings
from django.core.cache import caches
from django.test import override_settings

from bench.redis_wire import redis_round_trips
from inventory import locks
from inventory.errors import LockTimeout, LockUnavailable
from inventory.locks import queue as lock_queue
from inventory.locks.queue import QueuedLock
from inventory.locks.wire import lock_key
from tests.race import run_parallel, run_process


def redis_client():
    return caches[settings.LOCK_CACHE_ALIAS].client.get_client(write=True)


def full_key(sku):
    return caches[settings.LOCK_CACHE_ALIAS].make_key(lock_key(sku))


def test_locks_hold_a_key_per_sku_with_a_ttl_and_free_it_afterwards():
    client = redis_client()
    with locks.sku_locks(["B", "A"]):
        assert locks.held_skus() == {"A", "B"}
        for sku in ("A", "B"):
            ttl_ms = client.pttl(full_key(sku))
            assert 0 < ttl_ms <= settings.LOCK_TTL_SECONDS * 1000
            # The value is a random owner token, not a timestamp.
            assert len(client.get(full_key(sku))) >= 32
    assert not client.exists(full_key("A"), full_key("B"))
    assert locks.held_skus() == frozenset()


def test_several_skus_are_taken_in_sorted_order_up_to_the_first_busy_one_which_is_queued_for():
    """Deadlock freedom: the free locks before a busy one are held, none after it, while we queue."""
    client = redis_client()
    client.set(full_key("MUG"), b"someone-else", px=10_000)
    held = threading.Event()

    def take():
        with locks.sku_locks(["TEE", "CAP", "MUG", "CAP"], wait=5):
            held.set()

    thread = threading.Thread(target=take)
    thread.start()
    try:
        deadline = time.monotonic() + 5
        while not client.llen(full_key("MUG") + ":queue") and time.monotonic() < deadline:
            time.sleep(0.01)
        assert client.llen(full_key("MUG") + ":queue") == 1  # queued for MUG
        assert client.exists(full_key("CAP")) and not client.exists(full_key("TEE"))
        assert not held.is_set()
    finally:
        client.delete(full_key("MUG"))  # the rival goes; the waiter's poll finds the lock free
        thread.join(10)
    assert held.is_set()
    assert not client.exists(full_key("CAP"), full_key("MUG"), full_key("TEE"))


def test_several_free_skus_cost_one_round_trip_to_lock_and_one_to_release():
    with redis_round_trips() as sent:
        with locks.sku_locks(["TEE", "CAP", "MUG"]):
            assert locks.held_skus() == {"CAP", "MUG", "TEE"}
    assert sent == ["EVALSHA", "EVALSHA"]
    assert not redis_client().exists(full_key("CAP"), full_key("MUG"), full_key("TEE"))


def test_releasing_several_skus_hands_each_to_its_first_waiter():
    client = redis_client()
    got = {}

    def wait_for(sku):
        started = time.monotonic()
        with locks.sku_locks([sku], wait=5):
            got[sku] = time.monotonic() - started

    with locks.sku_locks(["CAP", "MUG"]):
        waiters = [threading.Thread(target=wait_for, args=(sku,)) for sku in ("CAP", "MUG")]
        for waiter in waiters:
            waiter.start()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not all(client.llen(full_key(sku) + ":queue") for sku in ("CAP", "MUG")):
            time.sleep(0.01)
        time.sleep(settings.LOCK_POLL_SECONDS)  # queued a poll's while: a hand-off, not a poll, wakes them
        release_started = time.monotonic()
    for waiter in waiters:
        waiter.join(10)
    assert sorted(got) == ["CAP", "MUG"]
    assert time.monotonic() - release_started < settings.LOCK_POLL_SECONDS * 5


def test_a_multi_sku_holder_whose_lock_lapsed_releases_the_rest_and_logs_the_overrun(caplog):
    client = redis_client()
    with caplog.at_level(logging.ERROR, logger="inventory.locks"):
        with locks.sku_locks(["CAP", "MUG"]):
            client.set(full_key("MUG"), b"next-holder", px=10_000)  # ours expired; someone else took it
    assert client.get(full_key("MUG")) == b"next-holder"  # never deleted from under its holder
    assert not client.exists(full_key("CAP"))
    assert any("lock overrun" in r.getMessage() and "MUG" in r.getMessage() for r in caplog.records)


@override_settings(LOCK_WAIT_SECONDS=0.3)
def test_a_busy_sku_times_out_with_lock_timeout_instead_of_hanging(caplog):
    other = caches[settings.LOCK_CACHE_ALIAS].lock(lock_key("MUG"), timeout=10)
    assert other.acquire(blocking=False)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="inventory.locks"):
        with pytest.raises(LockTimeout) as error:
            with locks.sku_locks(["CAP", "MUG"]):
                pass
    assert 0.25 < time.monotonic() - started < 2
    assert error.value.code == "lock_timeout"
    assert error.value.payload["skus"] == ["MUG"]
    assert "lock_timeout" in caplog.text
    # What we took before giving up is freed; the other holder keeps its lock.
    assert not redis_client().exists(full_key("CAP"))
    assert other.owned()
    other.release()


def test_an_expired_lock_is_never_deleted_from_under_its_next_holder(caplog):
    with override_settings(LOCK_TTL_SECONDS=0.2):
        with caplog.at_level(logging.ERROR, logger="inventory.locks"):
            with locks.sku_locks(["MUG"]):
                time.sleep(0.35)  # stall past the TTL
                successor = caches[settings.LOCK_CACHE_ALIAS].lock(lock_key("MUG"), timeout=10)
                assert successor.acquire(blocking=False)
    assert "lock overrun" in caplog.text
    assert successor.owned(), "the stale holder's release must not delete the successor's lock"
    successor.release()


def _hold_and_die(sku):
    with override_settings(LOCK_TTL_SECONDS=2):
        with locks.sku_locks([sku]):
            os._exit(9)  # a crash: no release, no cleanup


def test_a_crashed_holder_blocks_the_sku_only_until_the_ttl():
    assert run_process(_hold_and_die, sku="MUG") == 9
    assert 0 < redis_client().pttl(full_key("MUG")) <= 2000
    started = time.monotonic()
    with override_settings(LOCK_WAIT_SECONDS=5):
        with locks.sku_locks(["MUG"]):
            waited = time.monotonic() - started
    assert 0.5 < waited < 2.5


def test_nested_lock_requests_are_refused():
    with locks.sku_locks(["MUG"]):
        with pytest.raises(RuntimeError, match="lock every SKU at once"):
            with locks.sku_locks(["TEE"]):
                pass


def _unreachable_caches() -> dict:
    return {**settings.CACHES, "locks": {**settings.CACHES["locks"], "LOCATION": "redis://127.0.0.1:1/0"}}


def test_without_the_fallback_an_unreachable_redis_raises_instead_of_running_unlocked():
    with override_settings(CACHES=_unreachable_caches(), LOCK_DB_FALLBACK=False):
        with pytest.raises(LockUnavailable) as error:
            with locks.sku_locks(["MUG"]):
                pytest.fail("must not run without the lock")
    assert error.value.code == "lock_unavailable"


def test_with_the_fallback_an_unreachable_redis_hands_the_section_the_stock_rows_locks():
    """Nothing runs unlocked: the section locks the rows in its transaction (test_redis_outage.py)."""
    with override_settings(CACHES=_unreachable_caches()), locks.sku_locks(["MUG"]) as held:
        assert held.rows and locks.held_skus() == {"MUG"}
    assert locks.held_skus() == frozenset()


def _queue_up(index, delay):
    time.sleep(delay)
    with locks.sku_locks(["MUG"]):
        redis_client().rpush("test:served", index)
        time.sleep(0.02)


def test_waiters_are_served_first_come_first_served():
    """A released lock goes to the longest waiter; later arrivals cannot barge past the queue."""
    redis_client().delete("test:served")
    with locks.sku_locks(["MUG"]):
        jobs = [{"index": i, "delay": 0.15 * i} for i in range(4)]
        runner = threading.Thread(target=run_parallel, args=(_queue_up, jobs), kwargs={"processes": 4})
        runner.start()
        time.sleep(0.8)  # all four are queued behind us, in index order
    runner.join(30)
    assert [int(i) for i in redis_client().lrange("test:served", 0, -1)] == [0, 1, 2, 3]
    redis_client().delete("test:served")


def test_a_waiter_that_gave_up_leaves_the_queue():
    with override_settings(LOCK_WAIT_SECONDS=0.2):
        with locks.sku_locks(["MUG"]):
            assert run_process(_try_briefly, sku="MUG") == 0
            assert redis_client().llen(full_key("MUG") + ":queue") == 0
    with locks.sku_locks(["MUG"]):  # free again, straight away
        pass


def _try_briefly(sku):
    try:
        with locks.sku_locks([sku]):
            os._exit(1)  # must not get the lock while the parent holds it
    except LockTimeout:
        os._exit(0)


def _wait_in_queue_then_die(sku):
    with override_settings(LOCK_WAIT_SECONDS=30):
        with locks.sku_locks([sku]):
            os._exit(3)  # never reached while the parent holds the lock


def _queued_waiters(sku):
    return redis_client().llen(full_key(sku) + ":queue")


def _wait_until(predicate, timeout=10):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_waiter_killed_in_the_queue_costs_the_next_buyer_one_short_claim_not_a_ttl():
    ctx = multiprocessing.get_context("fork")
    with locks.sku_locks(["MUG"]):
        child = ctx.Process(target=_wait_in_queue_then_die, args=("MUG",))
        child.start()
        _wait_until(lambda: _queued_waiters("MUG") == 1)
        os.kill(child.pid, signal.SIGKILL)
        child.join()
    started = time.monotonic()  # our release handed the lock to the dead waiter on a claim
    with locks.sku_locks(["MUG"]):
        waited = time.monotonic() - started
    assert waited < settings.LOCK_HANDOFF_CLAIM_SECONDS + 0.5 < settings.LOCK_TTL_SECONDS


def test_a_dead_waiter_at_the_head_of_the_queue_does_not_block_a_free_lock():
    ctx = multiprocessing.get_context("fork")
    crashed = caches[settings.LOCK_CACHE_ALIAS].lock(lock_key("MUG"), timeout=0.5)
    assert crashed.acquire(blocking=False)  # a holder that will crash: its lock simply expires
    child = ctx.Process(target=_wait_in_queue_then_die, args=("MUG",))
    child.start()
    _wait_until(lambda: _queued_waiters("MUG") == 1)
    os.kill(child.pid, signal.SIGKILL)
    child.join()
    started = time.monotonic()
    with locks.sku_locks(["MUG"]):
        waited = time.monotonic() - started
    assert waited < 0.5 + settings.LOCK_HANDOFF_CLAIM_SECONDS + 0.5


class SoftTimeLimit(Exception):
    """Stands in for Celery's SoftTimeLimitExceeded, raised by a signal in the middle of a wait."""


def _interrupted_while_waiting(sku):
    def time_limit(signum, frame):
        raise SoftTimeLimit()

    signal.signal(signal.SIGALRM, time_limit)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    try:
        with override_settings(LOCK_WAIT_SECONDS=30):
            with locks.sku_locks([sku]):
                os._exit(3)
    except SoftTimeLimit:
        os._exit(0)


def test_a_waiter_interrupted_by_a_time_limit_leaves_the_queue():
    with locks.sku_locks(["MUG"]):
        assert run_process(_interrupted_while_waiting, sku="MUG") == 0
        assert _queued_waiters("MUG") == 0
    started = time.monotonic()
    with locks.sku_locks(["MUG"]):
        assert time.monotonic() - started < 0.2


@override_settings(LOCK_WAIT_SECONDS=1, LOCK_POLL_SECONDS=0.05)
def test_several_skus_share_one_wait_budget():
    """One budget for the set, from the start: a SKU that frees after it runs out is not waited for,
    though it frees within a budget of taking the SKU before it."""
    cache = caches[settings.LOCK_CACHE_ALIAS]
    # Held by others: CAP frees at 0.6 s, MUG at 1.3 s (past the budget, within 1 s of CAP), TEE not now.
    others = [cache.lock(lock_key(sku), timeout=ttl) for sku, ttl in [("CAP", 0.6), ("MUG", 1.3), ("TEE", 10)]]
    assert all(other.acquire(blocking=False) for other in others)
    with pytest.raises(LockTimeout) as error:
        with locks.sku_locks(["CAP", "MUG", "TEE"]):
            pass
    assert error.value.payload["skus"] == ["MUG"]  # a budget per SKU would take MUG and give up on TEE
    others[-1].release()


def test_locks_taken_after_a_long_wait_all_get_a_fresh_ttl():
    other = caches[settings.LOCK_CACHE_ALIAS].lock(lock_key("TEE"), timeout=0.6)
    assert other.acquire(blocking=False)  # expires by itself after 0.6 s
    with override_settings(LOCK_TTL_SECONDS=2):
        with locks.sku_locks(["MUG", "TEE"]):  # MUG at once, then ~0.6 s queued for TEE
            assert redis_client().pttl(full_key("MUG")) > 1700


def test_wait_forever_is_accepted():
    client = caches[settings.LOCK_CACHE_ALIAS].client
    lock = client.get_client().lock(client.make_key("free"), timeout=5, lock_class=QueuedLock)
    assert lock.acquire(blocking_timeout=None)
    lock.release()


@override_settings(LOCK_POLL_SECONDS=0.2, LOCK_WAIT_SECONDS=5)
def test_lock_scripts_lost_from_redis_cost_a_poll_or_two_not_the_wait():
    """The first try skips the acquire script's reply, so a lost script (SCRIPT FLUSH, a restart)
    shows only as a poll timeout; the next try, with replies, loads it again."""
    with locks.sku_locks(["MUG"]):
        pass  # this process has loaded the scripts...
    assert QueuedLock.acquire_script_loaded
    redis_client().script_flush()  # ...and Redis loses them
    started = time.monotonic()
    with locks.sku_locks(["MUG"]):
        waited = time.monotonic() - started
        assert locks.held_skus() == {"MUG"}
    assert waited < 1.5  # two polls (0.4 s) and change, far from LOCK_WAIT_SECONDS
    assert not redis_client().exists(full_key("MUG"))
    with redis_round_trips() as sent, locks.sku_locks(["MUG"]):
        pass
    assert sent == ["CLIENT+EVALSHA+BLPOP", "EVALSHA"]  # loaded again: acquire and release, nothing more


def test_a_waiting_connection_that_redis_closed_is_replaced_before_the_next_wait():
    """Buyers keep one connection for their waits; a restart or CLIENT KILL must not fail a purchase."""
    with locks.sku_locks(["MUG"]):
        pass
    kept = lock_queue._waiting.connection
    killed = redis_client().client_kill_filter(_type="normal", skipme=True)
    assert killed >= 1  # the kept connection among them
    with locks.sku_locks(["MUG"]):
        assert locks.held_skus() == {"MUG"}
    assert lock_queue._waiting.connection is kept  # the same connection object, reconnected
    assert not redis_client().exists(full_key("MUG"))


@pytest.mark.parametrize(("serve_at_least", "served_by_first"), [(0, [b"a", b"b"]), (3, [b"a", b"b", b"c"])])
def test_a_holder_handed_the_lock_serves_those_queued_behind_it_then_and_later_arrivals_wait_for_the_next(
    monkeypatch, serve_at_least, served_by_first
):
    """The batch is cut at the hand-off (or at ``serve_at_least``), not when the new holder wakes."""
    client = redis_client()

    def queued_lock():
        # A long poll: nobody wakes before its hand-off or answer.
        return client.lock(full_key("MUG"), timeout=10, sleep=5, lock_class=QueuedLock, thread_local=False)

    outcomes = {}

    def buy(name, serve=0):
        lock = queued_lock()
        request = {"kind": b"k", "request": name.encode(), "serve": serve, "serve_at_least": serve_at_least}
        if lock.acquire(blocking_timeout=10, **request):
            outcomes[name] = [body for _, body in lock.taken]
            lock.answer({waiter: b"done by " + name.encode() for waiter, _ in lock.taken})
            lock.release()
        else:
            outcomes[name] = lock.served_result

    def queue(name):
        thread = threading.Thread(target=buy, args=(name,), name=name)
        before = _queued_waiters("MUG")
        thread.start()
        _wait_until(lambda: _queued_waiters("MUG") == before + 1)
        return thread

    wake_up = QueuedLock._acquire_and_wait
    late = []

    def buyers_queue_before_the_new_holder_wakes(self, *args):
        if threading.current_thread().name == "first" and not late:
            late.extend([queue("c"), queue("d")])
        return wake_up(self, *args)

    monkeypatch.setattr(QueuedLock, "_acquire_and_wait", buyers_queue_before_the_new_holder_wakes)
    holder = queued_lock()
    assert holder.acquire(blocking=False)
    first = threading.Thread(target=buy, args=("first", 63), name="first")
    first.start()
    _wait_until(lambda: _queued_waiters("MUG") == 1)
    early = [queue("a"), queue("b")]
    holder.release()  # hands the lock to "first", with a and b queued behind it
    for thread in [first, *early]:
        thread.join(10)
    _wait_until(lambda: len(late) == 2)
    for thread in late:
        thread.join(10)

    assert outcomes["first"] == served_by_first
    assert all(outcomes[name] == b"done by first" for name in ("a", "b"))
    for name in ("c", "d"):
        # Served by the first holder, or left for the next batch: here, each holds the lock in turn.
        assert outcomes[name] == (b"done by first" if name.encode() in served_by_first else [])
    assert not client.exists(full_key("MUG"))


@pytest.mark.parametrize("fate", ["untaken", "taken", "unknown"])
def test_a_redis_error_while_queued_with_a_request_says_what_became_of_it(monkeypatch, caplog, fate):
    """Untaken: the error stands (nothing changed). Taken: the holder's answer. Unknown: served, no answer."""
    client = redis_client()

    def queued_lock():
        return client.lock(full_key("MUG"), timeout=10, lock_class=QueuedLock, thread_local=False)

    holder = queued_lock()
    assert holder.acquire(blocking=False)

    def redis_fails(self, *args):
        raise redis.ConnectionError("gone while queued")

    monkeypatch.setattr(QueuedLock, "_acquire_quietly_and_wait", redis_fails)
    buyer = queued_lock()
    if fate == "taken":  # the holder took the request and answered just before Redis failed us
        client.set(full_key("MUG") + ":served:buyer", 1, px=10_000)
        client.rpush(full_key("MUG") + ":wake:buyer", b"Rthe answer")
    if fate == "unknown":  # and Redis is still failing when we try to leave the queue
        monkeypatch.setattr(buyer, "lua_abandon", lambda **kwargs: redis_fails(None))

    with caplog.at_level(logging.ERROR, logger="inventory.locks"):
        if fate == "untaken":
            with pytest.raises(redis.ConnectionError):
                buyer.acquire(blocking_timeout=5, token="buyer", kind=b"k", request=b"body")
        else:
            assert not buyer.acquire(blocking_timeout=5, token="buyer", kind=b"k", request=b"body")

    assert buyer.served == (fate != "untaken")
    assert buyer.served_result == (b"the answer" if fate == "taken" else None)
    assert ("its outcome is unknown" in caplog.text) == (fate == "unknown")
    assert holder.owned()
    holder.release()
