"""The one place that takes stock locks. Nothing else talks to Redis for locking.

A lock per SKU on redis-py's ``Lock`` over the django-redis connection of the ``locks`` cache alias:
``SET NX PX`` with a random owner token, released by a Lua compare-and-delete, so a holder can never
delete another holder's lock. Waiters queue first come first served (``QueuedLock``) instead of polling.
Several SKUs are taken in sorted order so two orders over the same SKUs cannot deadlock. The TTL frees
the SKU if the holder dies; the bounded wait raises ``LockTimeout`` instead of hanging.

The lock is only the fast path. If it expires mid-section (a stall past the TTL) the database still
guards: every change is a conditional UPDATE under CHECK constraints.
"""

import logging
import os
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


class QueuedLock(Lock):
    """redis-py's ``Lock``, first come first served: a release hands the lock to the longest waiter.

    Plain redis-py waiters poll (0.1 s sleeps by default): each wait costs up to a poll of latency,
    every poll costs CPU, and a newcomer that arrives just after a release barges past waiters
    that are asleep, so under a flash sale some buyers starve into ``lock_timeout``. Here a waiter
    queues its token in ``<key>:queue`` and blocks on its own wake-up list; the release script gives
    the key to the head of the queue (same compare-and-delete ownership check as redis-py) and wakes
    it. A queue entry carries its deadline in Redis server time, so waiters that gave up or died are
    skipped. The poll remains only as a fallback for a lock that expired unreleased (a crashed holder).
    ``bench/lock_wait.py`` measures this against polling.
    """

    lua_acquire = lua_release = None  # registered per class, not inherited from redis-py's Lock

    _NOW_MS = "local t = redis.call('time') local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)"

    # KEYS: lock, queue. ARGV: token, ttl_ms, wait_ms, our queue entry ('' before we queue).
    # Returns {1, entry} once we hold the lock, {0, entry} while we wait in the queue.
    LUA_ACQUIRE_SCRIPT = (
        _NOW_MS
        + """
        local holder = redis.call('get', KEYS[1])
        if holder == ARGV[1] then
            return {1, ARGV[4]}
        end
        while true do
            local head = redis.call('lindex', KEYS[2], 0)
            if not head or tonumber(string.match(head, '^(%d+):')) >= now then break end
            redis.call('lpop', KEYS[2])
        end
        local entry = ARGV[4]
        local head = redis.call('lindex', KEYS[2], 0)
        if not holder and (not head or head == entry) then
            if head then redis.call('lpop', KEYS[2]) end
            redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])
            return {1, entry}
        end
        if entry == '' then
            entry = (now + tonumber(ARGV[3])) .. ':' .. ARGV[1]
            redis.call('rpush', KEYS[2], entry)
            redis.call('pexpire', KEYS[2], tonumber(ARGV[3]) + tonumber(ARGV[2]))
        end
        return {0, entry}
    """
    )

    # KEYS: lock, queue. ARGV: token, ttl_ms. Returns 0 if the lock is no longer ours.
    LUA_RELEASE_SCRIPT = (
        _NOW_MS
        + """
        if redis.call('get', KEYS[1]) ~= ARGV[1] then
            return 0
        end
        while true do
            local entry = redis.call('lpop', KEYS[2])
            if not entry then
                redis.call('del', KEYS[1])
                return 1
            end
            local deadline, waiter = string.match(entry, '^(%d+):(.+)$')
            if tonumber(deadline) >= now then
                redis.call('set', KEYS[1], waiter, 'PX', ARGV[2])
                local wake = KEYS[1] .. ':wake:' .. waiter
                redis.call('rpush', wake, 1)
                redis.call('pexpire', wake, ARGV[2])
                return 1
            end
        end
    """
    )

    def register_scripts(self) -> None:
        cls = type(self)
        if cls.lua_acquire is None:
            cls.lua_acquire = self.redis.register_script(cls.LUA_ACQUIRE_SCRIPT)
        super().register_scripts()

    @property
    def _ttl_ms(self) -> int:
        return int(self.timeout * 1000)

    def acquire(self, sleep=None, blocking=None, blocking_timeout=None, token=None) -> bool:
        token = (token or uuid.uuid4().hex).encode() if not isinstance(token, bytes) else token
        blocking = self.blocking if blocking is None else blocking
        wait = (self.blocking_timeout if blocking_timeout is None else blocking_timeout) if blocking else 0
        poll = sleep or self.sleep
        queue = f"{self.name}:queue"
        wake = f"{self.name}:wake:{token.decode()}"
        deadline = time.monotonic() + wait
        entry = b""
        while True:
            got, entry = self.lua_acquire(
                keys=[self.name, queue], args=[token, self._ttl_ms, int(wait * 1000), entry], client=self.redis
            )
            remaining = deadline - time.monotonic()
            if got or remaining <= 0:
                break
            self.redis.blpop([wake], timeout=min(poll, remaining))
        if not got and entry:
            # Leave the queue. If a release handed us the lock meanwhile, it is ours after all.
            self.redis.lrem(queue, 1, entry)
            got = self.redis.get(self.name) == token
        self.redis.delete(wake)
        if got:
            self.local.token = token
        return bool(got)

    def do_release(self, expected_token) -> None:
        if not self.lua_release(
            keys=[self.name, f"{self.name}:queue"], args=[expected_token, self._ttl_ms], client=self.redis
        ):
            raise LockNotOwnedError("Cannot release a lock that's no longer owned", lock_name=self.name)


def held_skus() -> frozenset[str]:
    """SKUs whose locks this thread holds right now (a forked child holds none of its parent's)."""
    if getattr(_held, "pid", None) != os.getpid():
        return frozenset()
    return frozenset(_held.skus)


@contextmanager
def sku_locks(skus: Iterable[str], *, wait: float | None = None) -> Iterator[None]:
    """Hold the locks of ``skus`` for the duration of the block; ``wait`` overrides LOCK_WAIT_SECONDS.

    Not re-entrant: a thread that holds locks and asks for more would break the sorted order, so
    it is refused. ``inventory.services.stock_section`` lets nested services reuse the outer locks.
    """
    if held_skus():
        raise RuntimeError(f"Already holding {sorted(held_skus())}: lock every SKU at once, in one call")
    wanted = sorted(set(skus))
    client = caches[settings.LOCK_CACHE_ALIAS].client
    acquired: list[tuple[str, Lock]] = []
    _held.skus, _held.pid = set(), os.getpid()
    try:
        for sku in wanted:
            started = time.monotonic()
            try:
                lock = client.get_client(write=True).lock(
                    client.make_key(lock_key(sku)),
                    timeout=settings.LOCK_TTL_SECONDS,
                    sleep=settings.LOCK_POLL_SECONDS,
                    blocking_timeout=settings.LOCK_WAIT_SECONDS if wait is None else wait,
                    lock_class=QueuedLock,
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
        logger.error(
            "could not release the lock on %s: %s; it expires within %.1fs", sku, exc, settings.LOCK_TTL_SECONDS
        )


def lock_list() -> list[dict]:
    """Every stock lock in Redis now: SKU, milliseconds left, waiters queued (for operators)."""
    client = caches[settings.LOCK_CACHE_ALIAS].client
    redis_client = client.get_client(write=True)
    prefix = client.make_key(lock_key(""))
    held = []
    for key in redis_client.scan_iter(match=f"{prefix}*", count=500):
        sku = key.decode()[len(prefix) :]
        if ":" in sku:  # a queue or wake-up list, not a lock
            continue
        held.append(
            {"sku": sku, "ttl_ms": redis_client.pttl(key), "waiters": redis_client.llen(f"{key.decode()}:queue")}
        )
    return sorted(held, key=lambda lock: lock["sku"])


def lock_clear_all(*, force: bool) -> int:
    """Delete stale lock keys (queues, wake-up lists); with ``force`` also locks someone holds.

    Deleting a held lock lets a second holder in while the first is mid-transaction; the SQL guard
    still prevents overselling, but operators should only force after the holders are known dead.
    Returns how many keys were deleted.
    """
    client = caches[settings.LOCK_CACHE_ALIAS].client
    redis_client = client.get_client(write=True)
    prefix = client.make_key(lock_key(""))
    keys = [
        key
        for key in redis_client.scan_iter(match=f"{prefix}*", count=500)
        if force or ":" in key.decode()[len(prefix) :]
    ]
    if keys:
        redis_client.delete(*keys)
    logger.warning("cleared %d stock lock key(s)%s", len(keys), " including held locks (forced)" if force else "")
    return len(keys)
