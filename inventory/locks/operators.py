"""Tools for operators (``manage.py reset_locks``): what stock locks Redis holds, and clearing them."""

import logging

from django.conf import settings
from django.core.cache import caches

from inventory.locks.wire import lock_key, queue_key

logger = logging.getLogger(__package__)  # one logger for the package: inventory.locks


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
            {"sku": sku, "ttl_ms": redis_client.pttl(key), "waiters": redis_client.llen(queue_key(key.decode()))}
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
