"""Sold-out marks: a sell-out answered without queueing for the SKU's lock or opening a transaction.

A section that leaves a SKU with no unit free marks it, after its commit and before its locks go
(``inventory.batching``). Every section clears the marks of its SKUs as soon as it holds their locks,
before it may free a unit (a release, an expiry, a restock, an edit), so no unit is freed while its
SKU still looks sold out. A buyer whose order names a marked SKU is refused ``insufficient_stock``
at once (``orders.services.order_place``).

A mark can only refuse, never sell, and it lives ``SOLD_OUT_MARK_SECONDS``: a lost mark costs the
slow path; one left by a crash, or set late by a holder whose lock had lapsed, refuses for at most
that long. ``SOLD_OUT_MARK_SECONDS=0`` turns the marks off.
"""

import logging
from collections.abc import Iterable

import redis
from django.conf import settings

from inventory.errors import LockUnavailable
from inventory.locks.client import lock_client
from inventory.locks.wire import sold_out_key

logger = logging.getLogger(__name__)


def skus_sold_out(skus: Iterable[str]) -> set[str]:
    """The SKUs marked sold out; none if the marks are off or Redis cannot say (the slow path decides)."""
    if settings.SOLD_OUT_MARK_SECONDS <= 0:
        return set()
    skus = sorted(set(skus))
    try:
        client, make_key = lock_client()
        marks = client.mget([make_key(sold_out_key(sku)) for sku in skus])
    except redis.RedisError as exc:
        logger.warning("could not read the sold-out marks of %s: %s", skus, exc)
        return set()
    return {sku for sku, mark in zip(skus, marks, strict=True) if mark is not None}


def sold_out_mark(seconds: dict[str, float]) -> None:
    """Mark SKUs sold out, each for its number of seconds. A mark that fails to be set costs only speed."""
    skus = sorted(seconds)
    try:
        client, make_key = lock_client()
        with client.pipeline(transaction=False) as pipe:
            for sku in skus:
                pipe.set(make_key(sold_out_key(sku)), b"1", px=max(1, int(seconds[sku] * 1000)))
            pipe.execute()
    except redis.RedisError as exc:
        logger.warning("could not mark %s sold out: %s", skus, exc)
    else:
        logger.info("marked %s sold out", skus)


def sold_out_clear(skus: Iterable[str]) -> None:
    """Clear the SKUs' marks; ``LockUnavailable`` if Redis cannot, so nothing is freed under a mark."""
    skus = sorted(set(skus))
    try:
        client, make_key = lock_client()
        client.delete(*[make_key(sold_out_key(sku)) for sku in skus])
    except redis.RedisError as exc:
        logger.error("could not clear the sold-out marks of %s: %s", skus, exc)
        raise LockUnavailable(skus=skus) from exc
