"""Each thread's Redis client for the locks (and the sold-out marks beside them)."""

import threading

from django.conf import settings
from django.core.cache import caches
from django.core.signals import setting_changed
from django.dispatch import receiver

_clients = threading.local()
_clients_generation = 0  # bumped when the cache settings change (tests): every thread looks again


@receiver(setting_changed)
def _forget_lock_clients(*, setting, **kwargs):
    global _clients_generation
    if setting in {"CACHES", "LOCK_CACHE_ALIAS"}:
        _clients_generation += 1


def lock_client():
    """This thread's Redis client for locks and the cache's key function, looked up once.

    ``caches[...]`` is a context-local lookup; a hot-SKU buyer would pay it on every purchase.
    """
    if getattr(_clients, "generation", None) != _clients_generation:
        client = caches[settings.LOCK_CACHE_ALIAS].client
        _clients.redis, _clients.make_key = client.get_client(write=True), client.make_key
        _clients.generation = _clients_generation
    return _clients.redis, _clients.make_key
