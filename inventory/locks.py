"""The one place that takes stock locks. Nothing else talks to Redis for locking.

A lock per SKU on redis-py's ``Lock`` over the django-redis connection of the ``locks`` cache alias:
``SET NX PX`` with a random owner token, released by a Lua compare-and-delete, so a holder can never
delete another holder's lock. redis-py waits by polling (0.1 s sleeps by default); our subclass
instead lets a release wake the longest waiter at once (``BLPOP`` on a wake-up list), which costs
neither latency nor CPU while waiting (``bench/lock_wait.py`` measures both designs).
Several SKUs are taken in sorted order so two orders over the same SKUs cannot deadlock. The TTL frees
the SKU if the holder dies; the bounded wait raises ``LockTimeout`` instead of hanging.

The lock is only the fast path. If it expires mid-section (a stall past the TTL) the database still
guards: every change is a conditional UPDATE under CHECK constraints.
"""

import logging
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import redis
from django.conf import settings
from django.core.cache import caches
from redis.exceptions import LockNotOwnedError
from redis.lock import Lock

from inventory.errors import LockTimeout, LockUnavailable

logger = logging.getLogger(__name__)

_held = threading.local()


def lock_key(sku: str) -> str:
    return f"stock-lock:{sku}"


class WakeUpLock(Lock):
    """redis-py's ``Lock`` whose release wakes one blocked waiter instead of everyone polling.

    Release deletes the key only if our token still holds it (compare-and-delete, as redis-py does)
    and pushes a token onto ``<key>:wake``. Waiters block on that list with ``BLPOP``; Redis serves
    the longest-blocked client first. The poll interval remains as a fallback for a lock that was
    not released but expired (a crashed holder).
    """

    lua_release = None  # registered per class; redis-py would otherwise reuse its parent's script
    LUA_RELEASE_SCRIPT = """
        local token = redis.call('get', KEYS[1])
        if not token or token ~= ARGV[1] then
            return 0
        end
        redis.call('del', KEYS[1])
        redis.call('del', KEYS[2])
        redis.call('rpush', KEYS[2], 1)
        redis.call('pexpire', KEYS[2], ARGV[2])
        return 1
    """

    @property
    def wake_key(self) -> str:
        return f"{self.name}:wake"

    def acquire(self, sleep=None, blocking=None, blocking_timeout=None, token=None) -> bool:
        token = token or uuid.uuid4().hex
        blocking = self.blocking if blocking is None else blocking
        timeout = self.blocking_timeout if blocking_timeout is None else blocking_timeout
        deadline = time.monotonic() + timeout
        while True:
            if super().acquire(blocking=False, token=token):
                return True
            remaining = deadline - time.monotonic()
            if not blocking or remaining <= 0:
                return False
            self.redis.blpop([self.wake_key], timeout=min(sleep or self.sleep, remaining))

    def do_release(self, expected_token) -> None:
        wake_ttl_ms = max(int(self.sleep * 1000), 1)
        if not self.lua_release(keys=[self.name, self.wake_key], args=[expected_token, wake_ttl_ms], client=self.redis):
            raise LockNotOwnedError("Cannot release a lock that's no longer owned", lock_name=self.name)


def held_skus() -> frozenset[str]:
    """SKUs whose locks this thread holds right now."""
    return frozenset(getattr(_held, "skus", ()))


@contextmanager
def sku_locks(skus: Iterable[str]) -> Iterator[None]:
    """Hold the locks of ``skus`` for the duration of the block.

    Not re-entrant: a thread that holds locks and asks for more would break the sorted order, so
    it is refused. ``inventory.services.stock_section`` lets nested services reuse the outer locks.
    """
    if held_skus():
        raise RuntimeError(f"Already holding {sorted(held_skus())}: lock every SKU at once, in one call")
    wanted = sorted(set(skus))
    client = caches[settings.LOCK_CACHE_ALIAS].client
    acquired: list[tuple[str, Lock]] = []
    _held.skus = set()
    try:
        for sku in wanted:
            started = time.monotonic()
            try:
                lock = client.get_client(write=True).lock(
                    client.make_key(lock_key(sku)),
                    timeout=settings.LOCK_TTL_SECONDS,
                    sleep=settings.LOCK_POLL_SECONDS,
                    blocking_timeout=settings.LOCK_WAIT_SECONDS,
                    lock_class=WakeUpLock,
                )
                got = lock.acquire()
            except redis.RedisError as exc:
                logger.error("lock service unreachable while locking %s: %s", sku, exc)
                raise LockUnavailable(skus=[sku]) from exc
            waited = time.monotonic() - started
            if not got:
                logger.warning("lock_timeout: gave up on %s after %.3fs (holding %s)", sku, waited, _held.skus)
                raise LockTimeout(skus=[sku], waited_seconds=round(waited, 3))
            if waited >= settings.LOCK_WAIT_LOG_SECONDS:
                logger.info("lock wait: %s took %.3fs to acquire", sku, waited)
            acquired.append((sku, lock))
            _held.skus.add(sku)
        yield
    finally:
        _held.skus = set()
        for sku, lock in reversed(acquired):
            _release(sku, lock)


def _release(sku: str, lock: Lock) -> None:
    try:
        lock.release()
    except LockNotOwnedError:
        # The TTL ran out before we finished: another process may have held the SKU at the same
        # time. The SQL guard decided the outcome, but the TTL is too short for this workload.
        logger.error(
            "lock overrun: the lock on %s expired before its holder released it (TTL %.1fs); "
            "the database guard decided the outcome",
            sku,
            settings.LOCK_TTL_SECONDS,
        )
    except redis.RedisError as exc:
        # The TTL will free the key; the transaction has already committed or rolled back.
        logger.error("could not release the lock on %s: %s; it expires within %.1fs", sku, exc, settings.LOCK_TTL_SECONDS)

