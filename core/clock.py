"""The shop's one clock for deadlines: the database's.

Web and worker hosts' clocks disagree (no NTP, a VM resumed from a snapshot, a wrong time zone).
If each host judged expiry by its own clock, a host running an hour ahead would expire orders an
hour early and sell their stock again. So deadlines are written and compared on the database's
clock: in SQL comparisons with ``Now()`` (``CURRENT_TIMESTAMP``, UTC per session, see settings),
and where Python needs the time (a new order's ``expires_at``, a sweep lease) with ``db_now()``.

``db_now()`` reads the database's time once per ``DB_CLOCK_RESYNC_SECONDS`` and counts the time
since on this process's monotonic clock, which no wall-clock jump or skew moves.
"""

import threading
import time
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models.functions import Now
from django.db.models.sql import Query

_sync = threading.local()


def db_now() -> datetime:
    """The database's current time (aware, UTC), without a query most of the time."""
    synced = getattr(_sync, "value", None)
    elapsed = time.monotonic() - synced[1] if synced else None
    if elapsed is None or elapsed > settings.DB_CLOCK_RESYNC_SECONDS:
        synced = _sync.value = (_db_read_now(), time.monotonic())
        elapsed = 0.0
    return synced[0] + timedelta(seconds=elapsed)


def _db_read_now() -> datetime:
    sql, params = Query(None).get_compiler(connection=connection).compile(Now())
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {sql}", params)
        value = cursor.fetchone()[0]
    if isinstance(value, str):  # SQLite answers text
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC)
