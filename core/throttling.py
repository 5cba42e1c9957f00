"""Rate limits counted atomically in Redis, for limits that a burst of parallel requests must not beat."""

import hashlib
import math
import unicodedata
from contextlib import contextmanager

from django.conf import settings
from django.contrib.auth import get_backends, get_user_model
from django.shortcuts import render
from rest_framework.exceptions import Throttled
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

    Django's login form strips and NFKC-normalises the name, DRF's strips it; the backend then finds the
    account by its username (compared as the collation compares: "stan", "STAN", a full-width "stan") or
    its email. So the attempt counts against the account the name finds, through the backend's own
    ``user_for_login``: the username and every spelling of the email share one budget. A name that
    finds nobody counts against itself (hashed: any length or character; casefolded), beside the
    client's budget that every attempt counts against.
    """
    name = unicodedata.normalize("NFKC", username.strip())
    for backend in get_backends():
        resolve = getattr(backend, "user_for_login", None) or _user_by_username
        if (user := resolve(name)) is not None:
            return f"account:{user.pk}"
    return "user:" + hashlib.sha256(name.casefold().encode()).hexdigest()


def _user_by_username(name: str):
    user_model = get_user_model()
    try:
        return user_model._default_manager.get_by_natural_key(name)
    except user_model.DoesNotExist:
        return None


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


def login_throttled_page(request, throttle: LoginThrottle):
    """The 429 page of a form that guesses at accounts, with its ``Retry-After``."""
    response = render(request, "registration/login_throttled.html", {"retry_after": throttle.wait()}, status=429)
    response["Retry-After"] = str(throttle.wait())
    return response


class VoucherThrottle(CountingThrottle):
    """Refused voucher codes per client IP and per account, in ``VOUCHER_THROTTLE_RATE``: the quote, the
    checkout page and placing an order share it, so codes are not found by trying them (the refusal says
    why a code does not apply, which a buyer needs and a guesser must not get at speed).

    Each check of a code counts up front and one whose code applies is given back, so only refusals add
    up; over the rate every code, good or not, is answered 429 alike.
    """

    scope = "voucher"
    rate_setting = "VOUCHER_THROTTLE_RATE"

    def __init__(self, request):
        idents = [f"ip:{self.get_ident(request)}"]
        if request.user.is_authenticated:
            idents.append(f"customer:{request.user.pk}")
        super().__init__(idents)


def voucher_check_start(request, *, code: str) -> VoucherThrottle | None:
    """Count a check of the voucher ``code`` (None: no code, nothing to count), or raise DRF's
    ``Throttled``. The caller gives the attempt back once the code applies."""
    if not code:
        return None
    throttle = VoucherThrottle(request)
    if not throttle.attempt():
        raise Throttled(wait=throttle.wait())
    return throttle


@contextmanager
def voucher_check_counted(request, *, code: str, refusals: tuple[type[Exception], ...]):
    """``voucher_check_start`` around a block that checks ``code``: it stays counted only if the block
    raises one of ``refusals`` (the code does not apply)."""
    throttle = voucher_check_start(request, code=code)
    try:
        yield
    except refusals:
        raise
    except BaseException:
        if throttle is not None:
            throttle.give_back()
        raise
    if throttle is not None:
        throttle.give_back()
