import logging
import os
import threading
import time

import pytest
from django.conf import settings
from django.core.cache import caches
from django.test import override_settings

from inventory import locks
from inventory.errors import LockTimeout, LockUnavailable
from tests.race import run_parallel, run_process


def redis_client():
    return caches[settings.LOCK_CACHE_ALIAS].client.get_client(write=True)


def full_key(sku):
    return caches[settings.LOCK_CACHE_ALIAS].make_key(locks.lock_key(sku))


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


def test_several_skus_are_taken_in_sorted_order(monkeypatch):
    taken = []
    original = locks.QueuedLock.acquire

    def recording_acquire(self, **kwargs):
        taken.append(self.name)
        return original(self, **kwargs)

    monkeypatch.setattr(locks.QueuedLock, "acquire", recording_acquire)
    with locks.sku_locks(["TEE", "CAP", "MUG", "CAP"]):
        pass
    assert taken == [full_key(s) for s in ("CAP", "MUG", "TEE")]


@override_settings(LOCK_WAIT_SECONDS=0.3)
def test_a_busy_sku_times_out_with_lock_timeout_instead_of_hanging(caplog):
    other = caches[settings.LOCK_CACHE_ALIAS].lock(locks.lock_key("MUG"), timeout=10)
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
                successor = caches[settings.LOCK_CACHE_ALIAS].lock(locks.lock_key("MUG"), timeout=10)
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


def test_an_unreachable_redis_raises_instead_of_running_unlocked():
    unreachable = dict(settings.CACHES)
    unreachable["locks"] = {**settings.CACHES["locks"], "LOCATION": "redis://127.0.0.1:1/0"}
    with override_settings(CACHES=unreachable):
        with pytest.raises(LockUnavailable) as error:
            with locks.sku_locks(["MUG"]):
                pytest.fail("must not run without the lock")
    assert error.value.code == "lock_unavailable"


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
