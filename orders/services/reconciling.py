"""Where reconcile's incremental checks read from: the start of each check's last run that found no drift."""

from datetime import datetime, timedelta

from django.conf import settings
from django.core.cache import cache

# The start of each incremental check's last run that found no drift (``reconcile_since``).
RECONCILED_KEY = "reconcile:clean-since:{check}"


def reconcile_since(*, check: str) -> datetime | None:
    """Where the incremental ``check`` of the books ("refunds", "vouchers") reads from: the start of its last
    run that found no drift, less LEDGER_CHECKPOINT_MARGIN_SECONDS; None (read everything) if none is known.

    A run that found nothing vouches for the rows as they were when it began, so what can have drifted
    since was written since, and every write stamps ``updated_at`` (the querysets' ``update()`` and the
    services' SQL too). A run that finds drift leaves the point where it was: the drift is found again
    each run until it is fixed, as a full reading finds it, and the reading grows meanwhile. The margin
    covers a write stamped before a run began and committed after it read (no transaction lives as long:
    the ledger checkpoints rely on it too) and hosts' clocks that differ by less. The point is kept in
    the cache, not in a table of its own: a lost or evicted key costs one full reading. A change made
    behind the ORM's back that leaves ``updated_at`` alone is for ``reconcile --full``.
    """
    started = cache.get(RECONCILED_KEY.format(check=check))
    if started is None:
        return None
    return datetime.fromisoformat(started) - timedelta(seconds=settings.LEDGER_CHECKPOINT_MARGIN_SECONDS)


def reconcile_passed(*, check: str, started: datetime) -> None:
    """Record that ``check`` found no drift in a run begun at ``started`` (``db_now()``, taken before it read):
    its next incremental run reads from there (``reconcile_since``)."""
    cache.set(RECONCILED_KEY.format(check=check), started.isoformat(), timeout=None)
