"""Rate limits counted atomically in Redis, for limits that a burst of parallel requests must not beat."""

import math

from django.conf import settings
from rest_framework.throttling import SimpleRateThrottle


class CountingThrottle(SimpleRateThrottle):
    """One attempt counted against several idents at once (an address, an account, an email...).

    DRF's rate parsing, client address (``NUM_PROXIES``) and cache keys, but not its history list: that is
    read and written back, so a burst of parallel requests would all pass one check. Each attempt is counted
    up front with Redis' atomic INCR instead, in a fixed window of the rate's period. Subclasses name the
    ``scope`` and the ``rate_setting`` (read per request, so settings can change it) and pass the idents.
    """

    rate_setting = ""

    def __init__(self, idents: list[str]):
        super().__init__()
        self.keys = [self.cache_format % {"scope": self.scope, "ident": ident} for ident in idents]
        self.retry_after = None

    def get_rate(self):
        return getattr(settings, self.rate_setting)

    def attempt(self) -> bool:
        """Count one attempt; False (nothing counted, ``wait()`` set) once any ident is over the rate."""
        counts = [self._count(key) for key in self.keys]
        over = [key for key, count in zip(self.keys, counts, strict=True) if count and count > self.num_requests]
        if not over:
            return True
        self.give_back()  # a refused attempt does nothing, so it uses up nothing
        self.retry_after = max(self.cache.ttl(key) or self.duration for key in over)
        return False

    def give_back(self) -> None:
        """Uncount the attempt from every ident."""
        for key in self.keys:
            try:
                self.cache.decr(key)
            except ValueError:
                pass  # its window ended meanwhile

    def wait(self):
        return None if self.retry_after is None else max(1, math.ceil(self.retry_after))

    def _count(self, key: str) -> int | None:
        # None when Redis is down (the default cache ignores errors): requests then go unthrottled rather
        # than refused.
        for _ in range(2):
            self.cache.add(key, 0, self.duration)
            try:
                return self.cache.incr(key)
            except ValueError:
                continue  # it expired between add and incr: start the next window
        return None
