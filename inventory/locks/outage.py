"""Selling through a lock-service outage: the stock rows' own locks in the database stand in for Redis's.

The Redis lock is the fast path and the queue's fairness; the guarded UPDATE under CHECK constraints
is what keeps stock from being oversold. So while Redis cannot be reached, a section need not refuse:
it locks its SKUs' stock rows (``SELECT ... FOR UPDATE`` in primary-key order, so two sections over the
same SKUs cannot deadlock) inside its transaction and runs the same guarded statements, one buyer at a
time per row, without batching or the queue's order.

The first failure of Redis opens a window of ``LOCK_OUTAGE_RETRY_SECONDS`` during which this process
does not try Redis again (each try could cost a connect timeout); the first section after it tries
Redis, and goes back to its locks when Redis answers. Another process may still be inside its own
window meanwhile: a section under Redis's lock and one under the rows' lock may then run side by side,
which the guarded UPDATE makes safe (as it does a lock lost in a crash). ``LOCK_DB_FALLBACK=False``
refuses instead (``lock_unavailable``), as a shop that prefers refusing to slow, unordered selling
chooses.
"""

import logging
import math
import threading
import time
from collections.abc import Iterable

from django.conf import settings
from django.db import OperationalError, connection

from core.db import LOCK_WAIT_TIMEOUT
from inventory import sql
from inventory.errors import LockTimeout
from inventory.models import Stock
from shop.models import ProductVariant

logger = logging.getLogger(__name__)

_state = threading.Lock()
_down_until = 0.0  # time.monotonic() before which this process does not try Redis for its locks
_down_since: float | None = None  # when this process last found Redis unreachable; None: it answers


def lock_service_down() -> bool:
    """Whether sections in this process lock rows instead of trying Redis (only with the fallback on)."""
    return settings.LOCK_DB_FALLBACK and time.monotonic() < _down_until


def lock_service_failed(exc: BaseException) -> bool:
    """Note that Redis did not answer; whether sections fall back to row locks (``LOCK_DB_FALLBACK``)."""
    global _down_until, _down_since
    if not settings.LOCK_DB_FALLBACK:
        return False
    with _state:
        began = _down_since is None
        _down_since = _down_since or time.monotonic()
        _down_until = time.monotonic() + settings.LOCK_OUTAGE_RETRY_SECONDS
    if began:
        logger.warning("lock service unreachable (%s): selling under the database's row locks until it answers", exc)
    return True


def lock_service_answered() -> bool:
    """Note that Redis answered a lock command; whether that ended an outage of this process."""
    global _down_since
    if _down_since is None:
        return False
    with _state:
        since, _down_since = _down_since, None
    if since is None:
        return False
    logger.warning("lock service answers again after %.1fs: back to its locks", time.monotonic() - since)
    return True


def stock_rows_lock(skus: Iterable[str], *, wait: float) -> None:
    """Lock the SKUs' stock rows until the transaction ends, in primary-key order (call inside it).

    Waits at most ``wait`` seconds (whole seconds, at least one: InnoDB's unit), then ``LockTimeout``;
    the connection's own lock wait is restored for the statements after.
    """
    skus = sorted(set(skus))
    if (waits := sql.lock_wait_statements(seconds=max(1, math.ceil(wait)))) is None:
        return  # SQLite: the transaction holds the whole database file already
    wait_set, wait_restore = waits
    variants = ProductVariant.all_objects.filter(sku__in=skus).values("pk")  # a deleted one too
    # The subquery reads the products unlocked: only the outer query's rows, the stock's, are locked.
    rows = Stock.objects.filter(variant__in=variants).order_by("pk").select_for_update().values_list("pk", flat=True)
    started = time.monotonic()
    with connection.cursor() as cursor:
        cursor.execute(*wait_set)
        try:
            list(rows)
        except OperationalError as exc:
            if exc.args[0] != LOCK_WAIT_TIMEOUT:
                raise
            waited = time.monotonic() - started
            logger.warning("lock_timeout: gave up on the stock rows of %s after %.3fs", skus, waited)
            raise LockTimeout(skus=skus, waited_seconds=round(waited, 3)) from exc
        finally:
            cursor.execute(*wait_restore)
