"""Sold-out marks: a sell-out answered without queueing for the SKU's lock or opening a transaction.

A section that leaves a SKU with no unit free marks it, after its commit and before its locks go
(``inventory.batching``). Every section clears the marks of its SKUs as soon as it holds their locks,
before it may free a unit (a release, an expiry, a restock, an edit), so no unit is freed while its
SKU still looks sold out. A buyer whose order names a marked SKU is refused ``insufficient_stock``
at once (``inventory.batching.stock_section_batched``): for one SKU by the acquire script, in the
round trip that would queue it (``sku_lock_serving`` raises ``MarkedSoldOut``), for several SKUs
by the round trip that would lock them (``sku_locks`` with ``refuse_sold_out``).

A mark can only refuse, never sell, and it lives ``SOLD_OUT_MARK_SECONDS``: a lost mark costs the
slow path; one left by a crash, or set late by a holder whose lock had lapsed, refuses for at most
that long. ``SOLD_OUT_MARK_SECONDS=0`` turns the marks off.

While Redis cannot be reached (``outage``) marks are neither read nor set, and a section that may free
units notes its SKUs: their marks are cleared as soon as this process reaches Redis again.
"""

import logging
import time
from collections.abc import Iterable

import hiredis
import redis
from django.conf import settings

from inventory.errors import LockUnavailable
from inventory.locks.client import lock_client
from inventory.locks.outage import lock_service_down, lock_service_failed
from inventory.locks.queue import waiting_connection
from inventory.locks.wire import lock_key, sold_out_key

logger = logging.getLogger(__name__)


class MarkedSoldOut(Exception):
    """The SKUs' sold-out marks are set: nothing was queued or locked. The caller says what that refuses."""

    def __init__(self, *skus: str):
        super().__init__(*skus)
        self.skus = set(skus)


def _mark_key(make_key, sku: str) -> str:
    return sold_out_key(make_key(lock_key(sku)))


_seen: dict[str, float] = {}  # SKUs this process last found marked, and when (time.monotonic)


def sold_out_lately(sku: str) -> bool:
    """Whether this process found the SKU marked within the last ``SOLD_OUT_MARK_SECONDS``.

    Only a hint of where to look first: a buyer of such a SKU reads its mark (``skus_sold_out``), the
    cheapest answer Redis gives, before queueing, which would find the mark too but at the cost of
    the acquire script. The hint never refuses anyone by itself.
    """
    seen = _seen.get(sku)
    return seen is not None and time.monotonic() - seen < settings.SOLD_OUT_MARK_SECONDS


def sold_out_seen(sku: str) -> None:
    """Remember that the SKU was found marked (``sold_out_lately``)."""
    _seen[sku] = time.monotonic()


def skus_sold_out(skus: Iterable[str]) -> set[str]:
    """The SKUs marked sold out; none if the marks are off or Redis cannot say (the slow path decides).

    Read on this thread's waiting connection with the command packed by hiredis (as the acquire's
    first try is): refusals after a sell-out are most of a flash sale's requests, and redis-py's
    wrapper around a command would cost each of them more than Redis spends on the answer.
    """
    if settings.SOLD_OUT_MARK_SECONDS <= 0 or lock_service_down():
        return set()
    skus = sorted(set(skus))
    client, make_key = lock_client()
    try:
        connection = waiting_connection(client.connection_pool)
        try:
            keys = [_mark_key(make_key, sku) for sku in skus]
            connection.send_packed_command([hiredis.pack_command(("MGET", *keys))])
            marks = connection.read_response()
        except BaseException:
            connection.disconnect()  # a reply may be left unread on it; the next use reconnects
            raise
    except (redis.RedisError, OSError) as exc:
        logger.warning("could not read the sold-out marks of %s: %s", skus, exc)
        return set()
    marked = set()
    for sku, mark in zip(skus, marks, strict=True):
        if mark is None:
            _seen.pop(sku, None)
        else:
            marked.add(sku)
            sold_out_seen(sku)
    return marked


def sold_out_mark(seconds: dict[str, float]) -> None:
    """Mark SKUs sold out, each for its number of seconds. A mark that fails to be set costs only speed."""
    skus = sorted(seconds)
    if lock_service_down():
        return
    try:
        client, make_key = lock_client()
        with client.pipeline(transaction=False) as pipe:
            for sku in skus:
                pipe.set(_mark_key(make_key, sku), b"1", px=max(1, int(seconds[sku] * 1000)))
            pipe.execute()
    except redis.RedisError as exc:
        logger.warning("could not mark %s sold out: %s", skus, exc)
    else:
        logger.info("marked %s sold out", skus)


_clear_later: set[str] = set()  # SKUs whose marks a section could not clear in an outage


def sold_out_clear(skus: Iterable[str]) -> None:
    """Clear the SKUs' marks; ``LockUnavailable`` if Redis cannot, so nothing is freed under a mark.

    In an outage the SKUs are noted instead, for ``sold_out_clear_noted`` once Redis answers.
    """
    skus = sorted(set(skus))
    if lock_service_down():
        _clear_later.update(skus)
        return
    try:
        client, make_key = lock_client()
        client.delete(*[_mark_key(make_key, sku) for sku in skus])
    except redis.RedisError as exc:
        logger.error("could not clear the sold-out marks of %s: %s", skus, exc)
        lock_service_failed(exc)  # the next section locks rows; this one held Redis's lock, now worth nothing
        raise LockUnavailable(skus=skus) from exc


def sold_out_clear_noted() -> None:
    """Clear the marks of the SKUs whose units may have been freed in an outage (see the module).

    If Redis fails again meanwhile they stay noted; a mark left refuses for at most its lifetime.
    """
    skus = sorted(_clear_later)
    if skus:
        try:
            sold_out_clear(skus)
        except LockUnavailable:
            return
        _clear_later.difference_update(skus)
