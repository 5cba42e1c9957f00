"""Stock locks: the one place that takes them. Nothing else talks to Redis for locking.

A lock per SKU on redis-py's ``Lock`` over the django-redis connection of the ``locks`` cache alias
(``LOCK_CACHE_ALIAS``): ``SET NX PX`` with a random owner token, released by a Lua compare-and-delete,
so a holder can never delete another holder's lock. Waiters queue first come first served
(``queue.QueuedLock``) instead of polling. Several SKUs are taken in sorted order so two orders over
the same SKUs cannot deadlock. The TTL frees the SKU if the holder dies; the bounded wait raises
``LockTimeout`` instead of hanging. An unreachable Redis never lets a section run unlocked: it locks
the stock rows in the database instead (``outage``), or is refused ``LockUnavailable``.

The lock is only the fast path. If it expires mid-section (a stall past the TTL) the database still
guards: every change is a conditional UPDATE under CHECK constraints.

``sku_lock_serving`` is group commit for a hot SKU: a waiter leaves its request with its place in the
queue, and the holder may carry it out in its own transaction and answer it.

The package:

    __init__     the API: ``sku_locks``, ``sku_lock_serving``, ``held_skus``, and the operators' tools
    queue        ``QueuedLock``, the redis-py ``Lock`` with the queue, and its waiting connection
    wire         what is kept in Redis: key names, wake-up messages, requests and answers (typed JSON)
    client       each thread's Redis client for the locks
    soldout      the sold-out marks: a sell-out answered without queueing for the lock
    operators    ``lock_list`` and ``lock_clear_all``, for ``manage.py reset_locks``
    outage       while Redis cannot be reached: the stock rows' locks in the database instead
    scripts/     the Lua scripts ``QueuedLock`` runs, each after ``prelude.lua``
"""

import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager

import redis
from django.conf import settings
from redis.exceptions import LockNotOwnedError

from core.metrics import LOCK_OVERRUNS, LOCK_SERVICE_FALLBACKS, LOCK_WAIT
from inventory.errors import LockTimeout, LockUnavailable
from inventory.locks.client import lock_client
from inventory.locks.operators import lock_clear_all, lock_list
from inventory.locks.outage import lock_service_answered, lock_service_down, lock_service_failed, stock_rows_lock
from inventory.locks.queue import QueuedLock
from inventory.locks.soldout import (
    MarkedSoldOut,
    skus_sold_out,
    sold_out_clear,
    sold_out_clear_noted,
    sold_out_lately,
    sold_out_mark,
    sold_out_seen,
)
from inventory.locks.wire import RUN_ALONE_ANSWER, lock_key, request_tag

__all__ = [
    "HeldLocks",
    "MarkedSoldOut",
    "held_skus",
    "lock_clear_all",
    "lock_list",
    "sku_lock_serving",
    "sku_locks",
    "skus_sold_out",
    "sold_out_clear",
    "sold_out_lately",
    "sold_out_mark",
]

logger = logging.getLogger(__name__)

_held = threading.local()


def held_skus() -> frozenset[str]:
    """SKUs whose locks this thread holds right now (a forked child holds none of its parent's)."""
    if getattr(_held, "pid", None) != os.getpid():
        return frozenset()
    return frozenset(_held.skus)


class HeldLocks:
    """What ``sku_locks`` holds: Redis's locks, or, in an outage (``outage``), the promise of the rows' locks."""

    def __init__(self, skus: list[str], *, rows: bool, wait: float):
        self.skus, self.rows, self.wait = skus, rows, wait

    def rows_lock(self) -> None:
        """Inside the section's transaction: lock the stock rows if Redis's locks stand in for nothing."""
        if self.rows:
            stock_rows_lock(self.skus, wait=self.wait)


@contextmanager
def sku_locks(skus: Iterable[str], *, wait: float | None = None, refuse_sold_out: bool = False) -> Iterator[HeldLocks]:
    """Hold the locks of ``skus`` for the duration of the block; ``wait`` overrides LOCK_WAIT_SECONDS.

    Several SKUs that nobody holds are taken in one round trip (``QueuedLock.take_free``) and released
    in one; a SKU that is held or queued for is queued for as one SKU alone is, still in sorted order.
    With ``refuse_sold_out``, a SKU marked sold out raises ``MarkedSoldOut`` (naming every marked
    SKU) from that same round trip, with nothing taken.

    While Redis cannot be reached (``outage``) nothing is taken here: the caller locks the stock rows
    with ``rows_lock()`` once its transaction is open; with ``LOCK_DB_FALLBACK`` off it is refused
    ``LockUnavailable`` instead.

    Not re-entrant: a thread that holds locks and asks for more would break the sorted order, so
    it is refused. ``inventory.services.stock_section`` lets nested services reuse the outer locks.
    """
    _refuse_nested()
    wanted = sorted(set(skus))
    with ExitStack() as stack:
        rows = lock_service_down()
        if not rows:
            try:
                stack.enter_context(_redis_locks(wanted, wait=wait, refuse_sold_out=refuse_sold_out))
            except LockUnavailable:
                if not lock_service_down():
                    raise
                rows = True
        if rows:
            LOCK_SERVICE_FALLBACKS.inc()
            _held.skus, _held.pid = set(wanted), os.getpid()
            stack.callback(setattr, _held, "skus", set())
        yield HeldLocks(wanted, rows=rows, wait=settings.LOCK_WAIT_SECONDS if wait is None else wait)


@contextmanager
def _redis_locks(wanted: list[str], *, wait: float | None, refuse_sold_out: bool) -> Iterator[None]:
    """Redis's locks of the sorted SKUs ``wanted``, as ``sku_locks`` describes."""
    acquired: list[QueuedLock] = []
    _held.skus, _held.pid = set(), os.getpid()
    started = time.monotonic()
    deadline = started + (settings.LOCK_WAIT_SECONDS if wait is None else wait)  # one budget for the set
    try:
        while len(acquired) < len(wanted):
            rest = wanted[len(acquired) :]
            if len(rest) > 1 or refuse_sold_out:
                taken = _take_free(rest, refuse_sold_out=refuse_sold_out)
                refuse_sold_out = False  # the marks are read once, before anything is taken
                acquired.extend(taken)
                _held.skus.update(lock.sku for lock in taken)
                if len(acquired) == len(wanted):
                    break
            sku = wanted[len(acquired)]
            lock, got = _acquire(sku, wait=max(deadline - time.monotonic(), 0))
            waited = time.monotonic() - started
            if not got:
                LOCK_WAIT.labels(outcome="timeout").observe(waited)
                logger.warning("lock_timeout: gave up on %s after %.3fs, holding %s", sku, waited, sorted(_held.skus))
                raise LockTimeout(skus=[sku], waited_seconds=round(waited, 3))
            acquired.append(lock)
            _held.skus.add(sku)
        waited = time.monotonic() - started
        LOCK_WAIT.labels(outcome="acquired").observe(waited)
        if waited >= settings.LOCK_WAIT_LOG_SECONDS:
            logger.info("lock wait: %s took %.3fs to acquire", ",".join(wanted), waited)
        if len(acquired) > 1 and waited > settings.LOCK_TTL_SECONDS / 10:
            _renew(acquired)  # the first locks aged while we queued for the others
        yield
    finally:
        _held.skus = set()
        if len(acquired) == 1:
            _release(acquired[0])
        elif acquired:
            _release_all(acquired)


@contextmanager
def sku_lock_serving(sku: str, *, kind: str, body: bytes, wait: float | None = None, refuse_sold_out: bool = False):
    """Hold one SKU's lock, or have its holder serve our request: group commit for a hot SKU.

    A waiter leaves ``body`` with its place in the queue. The holder gets the lock with the queued
    requests of its ``kind`` and wire version (``wire.request_tag``) in ``lock.taken`` (up to
    STOCK_BATCH_MAX - 1; ``QueuedLock.acquire`` says where a batch is cut), carries them out in its
    own transaction and ``answer``s each after the commit, so one lock hold and one commit serve a
    whole queue of buyers. Yields ``(lock, None)`` to the holder and ``(None, answer)`` to a served
    waiter, which holds nothing; ``answer`` is None if the outcome is unknown: the holder took the
    request and never answered (it died, or stalled past its TTL), or Redis failed while the request
    may have been taken.

    With ``refuse_sold_out``, a SKU marked sold out raises ``MarkedSoldOut`` instead, from the round
    trip that would have queued us (``soldout``).

    While Redis cannot be reached (``outage``) the answer is ``RunAlone``: nothing was queued, and the
    caller's own section locks the stock rows.
    """
    _refuse_nested()
    started = time.monotonic()
    wait = settings.LOCK_WAIT_SECONDS if wait is None else wait
    try:
        if lock_service_down():
            raise LockUnavailable(skus=[sku])
        lock, got = _acquire(sku, wait=wait, kind=request_tag(kind), request=body, refuse_sold_out=refuse_sold_out)
    except LockUnavailable:
        if not lock_service_down():
            raise
        yield None, RUN_ALONE_ANSWER  # nothing was queued: the caller runs its section alone, under the rows' locks
        return
    if lock.sold_out:
        sold_out_seen(sku)
        raise MarkedSoldOut(sku)
    waited = time.monotonic() - started
    LOCK_WAIT.labels(outcome="served" if lock.served else "acquired" if got else "timeout").observe(waited)
    if waited >= settings.LOCK_WAIT_LOG_SECONDS:
        logger.info("lock wait: %s took %.3fs to %s", sku, waited, "be served" if lock.served else "acquire")
    if lock.served:
        yield None, lock.served_result
        return
    if not got:
        logger.warning("lock_timeout: gave up on %s after %.3fs", sku, waited)
        raise LockTimeout(skus=[sku], waited_seconds=round(waited, 3))
    _held.skus, _held.pid = {sku}, os.getpid()
    try:
        yield lock, None
    finally:
        _held.skus = set()
        _release(lock)


def _refuse_nested() -> None:
    if held_skus():
        raise RuntimeError(f"Already holding {sorted(held_skus())}: lock every SKU at once, in one call")


def _acquire(
    sku: str, *, wait: float, kind: bytes = b"", request: bytes = b"", refuse_sold_out: bool = False
) -> tuple[QueuedLock, bool]:
    """One SKU's lock and whether we got it; an unreachable Redis is ``lock_unavailable``."""
    try:
        lock = _new_lock(sku)
        serve, serve_at_least = (settings.STOCK_BATCH_MAX - 1, settings.STOCK_BATCH_MIN - 1) if kind else (0, 0)
        got = lock.acquire(
            blocking_timeout=wait,
            kind=kind,
            request=request,
            serve=serve,
            serve_at_least=serve_at_least,
            refuse_sold_out=refuse_sold_out,
        )
    except redis.RedisError as exc:
        QueuedLock.acquire_script_loaded = False  # a restarted Redis has lost it
        logger.error("lock service unreachable while locking %s: %s", sku, exc)
        lock_service_failed(exc)
        raise LockUnavailable(skus=[sku]) from exc
    if lock_service_answered():
        sold_out_clear_noted()
    return lock, got


def _new_lock(sku: str) -> QueuedLock:
    """A lock object for one SKU (no round trip): one per acquisition, used by the thread that made it."""
    redis_client, make_key = lock_client()
    lock = redis_client.lock(
        make_key(lock_key(sku)),
        timeout=settings.LOCK_TTL_SECONDS,
        sleep=settings.LOCK_POLL_SECONDS,
        lock_class=QueuedLock,
        thread_local=False,
    )
    lock.sku = sku
    return lock


def _take_free(skus: list[str], *, refuse_sold_out: bool) -> list[QueuedLock]:
    """The locks of ``skus`` taken in one round trip, from the first up to one held or queued for."""
    try:
        locks = [_new_lock(sku) for sku in skus]
        taken, marked = QueuedLock.take_free(locks, refuse_sold_out=refuse_sold_out)
    except redis.RedisError as exc:
        logger.error("lock service unreachable while locking %s: %s", ",".join(skus), exc)
        lock_service_failed(exc)
        raise LockUnavailable(skus=skus) from exc
    if lock_service_answered():
        sold_out_clear_noted()
    if marked:
        for sku in marked:
            sold_out_seen(sku)
        raise MarkedSoldOut(*marked)
    return locks[:taken]


def _renew(acquired: list[QueuedLock]) -> None:
    """Give every held lock a full TTL again; if one already lapsed, give up rather than run unlocked."""
    for lock in acquired:
        try:
            lock.extend(settings.LOCK_TTL_SECONDS, replace_ttl=True)
        except LockNotOwnedError as exc:
            logger.warning("lock_timeout: the lock on %s lapsed while waiting for the others", lock.sku)
            raise LockTimeout(skus=[lock.sku]) from exc


def _release(lock: QueuedLock) -> None:
    try:
        lock.release()
    except LockNotOwnedError:
        _log_overrun(lock.sku)
    except redis.RedisError as exc:
        _log_release_failed([lock.sku], exc)


def _release_all(acquired: list[QueuedLock]) -> None:
    """Release several locks in one round trip."""
    try:
        lapsed = QueuedLock.release_all(acquired)
    except redis.RedisError as exc:
        _log_release_failed([lock.sku for lock in acquired], exc)
        return
    for lock in lapsed:
        _log_overrun(lock.sku)


def _log_overrun(sku: str) -> None:
    LOCK_OVERRUNS.inc()
    # The TTL ran out before we finished: another process may have held the SKU at the same
    # time. The SQL guard decided the outcome, but the TTL is too short for this workload.
    logger.error(
        "lock overrun: the lock on %s expired before its holder released it (TTL %.1fs); "
        "the database guard decided the outcome",
        sku,
        settings.LOCK_TTL_SECONDS,
    )


def _log_release_failed(skus: list[str], exc: Exception) -> None:
    # The TTL will free the keys; the transaction has already committed or rolled back.
    logger.error(
        "could not release the lock on %s: %s; it expires within %.1fs",
        ",".join(skus),
        exc,
        settings.LOCK_TTL_SECONDS,
    )


@contextmanager
def lease(name: str, *, seconds: float) -> Iterator[bool]:
    """A turn at ``name`` that only one process has at a time, not waited for: True if this caller has it
    (a drop's line runner passes over its line alone, so what it read of the stock stays true while it
    admits). Lapses after ``seconds`` if its holder dies; a stall past them lets a second turn in, and
    the database's guards still decide every unit."""
    client, make_key = lock_client()
    turn = redis.lock.Lock(client, make_key(f"lease:{name}"), timeout=seconds, blocking=False)
    held = turn.acquire()
    try:
        yield held
    finally:
        if held:
            try:
                turn.release()
            except LockNotOwnedError:
                logger.warning("the lease %s lapsed before its turn ended", name)
