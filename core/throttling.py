"""Rate limits counted atomically in Redis, for limits that a burst of parallel requests must not beat."""

import hashlib
import math
import unicodedata

from django.conf import settings
from django.contrib.auth import get_user_model
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


def _login_name_ident(username: str) -> str:
    """The name a login attempt counts against, resolved as authentication resolves it.

    Django's login form strips and NFKC-normalises the name, DRF's strips it, and MySQL's collation folds
    case and width when it looks the account up: "stan ", "stan\u3000" and a full-width "stan" all log in
    as stan. So the attempt counts against the account that name finds, or, if none, the normalised name
    (hashed: any length or character; casefolded as the collation compares).
    """
    name = unicodedata.normalize("NFKC", username.strip())
    user_model = get_user_model()
    try:
        return f"account:{user_model._default_manager.get_by_natural_key(name).pk}"
    except user_model.DoesNotExist:
        return "user:" + hashlib.sha256(name.casefold().encode()).hexdigest()


class LoginThrottle(CountingThrottle):
    """Failed logins per client IP and per username: the token API, the login page and the admin share them.

    Each attempt is counted up front, and a successful login gives its count back, so only failures add up.
    """

    scope = "login"
    rate_setting = "LOGIN_THROTTLE_RATE"

    def __init__(self, request, *, username: str):
        idents = [f"ip:{self.get_ident(request)}"]
        if username:
            idents.append(_login_name_ident(username))
        super().__init__(idents)
