"""The one place that takes stock locks. Nothing else talks to Redis for locking.

A lock per SKU on django-redis ``cache.lock`` (redis-py ``Lock``): ``SET NX PX`` with a random owner
token, released by a Lua compare-and-delete, so a holder can never delete another holder's lock.
Several SKUs are taken in sorted order so two orders over the same SKUs cannot deadlock. The TTL frees
the SKU if the holder dies; the bounded wait raises ``LockTimeout`` instead of hanging.

The lock is only the fast path. If it expires mid-section (a stall past the TTL) the database still
guards: every change is a conditional UPDATE under CHECK constraints.
"""

import logging
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import redis
from django.conf import settings
from django.core.cache import caches
from redis.exceptions import LockNotOwnedError

from inventory.errors import LockTimeout, LockUnavailable

logger = logging.getLogger(__name__)

_held = threading.local()


def lock_key(sku: str) -> str:
    return f"stock-lock:{sku}"


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
    cache = caches[settings.LOCK_CACHE_ALIAS]
    acquired: list[tuple[str, object]] = []
    _held.skus = set()
    try:
        for sku in wanted:
            lock = cache.lock(
                lock_key(sku),
                timeout=settings.LOCK_TTL_SECONDS,
                sleep=settings.LOCK_POLL_SECONDS,
                blocking_timeout=settings.LOCK_WAIT_SECONDS,
            )
            started = time.monotonic()
            try:
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


def _release(sku: str, lock) -> None:
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

