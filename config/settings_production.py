"""Production settings: ``config.settings`` over HTTPS only, refusing switches that are unsafe in production.

Run the shop, its workers and ``manage.py`` with ``DJANGO_SETTINGS_MODULE=config.settings_production``;
``manage.py check --deploy`` then reports no issues (tests/test_security.py runs it). Every setting here
is read from the environment, and each default is the safe choice.
"""

from django.core.exceptions import ImproperlyConfigured

from config.settings import *  # noqa: F403
from config.settings import (
    DATABASES,
    DEBUG,
    PAYMENT_PROVIDER,
    PAYMENT_PROVIDERS,
    REDIS_MODE,
    env,
)

# --- Refusals ---------------------------------------------------------------------------------
# A misconfigured production server must not start rather than run quietly unsafe.

if DEBUG:
    raise ImproperlyConfigured(
        "DEBUG is on, which config.settings_production refuses: debug pages show code, settings and SQL "
        "to anyone. Unset DEBUG (use config.settings for local development)."
    )
# Production has no local provider: its webhook endpoint would take Stripe-signed events too.
PAYMENT_PROVIDERS = {name: path for name, path in PAYMENT_PROVIDERS.items() if name != "local"}
if PAYMENT_PROVIDER == "local":
    raise ImproperlyConfigured(
        "PAYMENT_PROVIDER is local, which config.settings_production refuses: its page lets anyone pay "
        f"or decline without taking any money. Set PAYMENT_PROVIDER to {' or '.join(PAYMENT_PROVIDERS)}, "
        "with that provider's keys (docs/configuration.md)."
    )
# What the provider new checkouts use needs of its own settings, it checks itself when the apps load
# (``production_problems``: payments.apps), so a second provider brings its own checks.
PRODUCTION = True
if not env("DATABASE_URL", default="") or REDIS_MODE != "redis":
    # The SQLite file and the embedded Redis are for one machine's development; locking is proven on
    # MySQL/MariaDB and a real Redis only.
    raise ImproperlyConfigured("config.settings_production needs DATABASE_URL and REDIS_URL (or REDIS_SENTINELS)")

ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=[])
if not ALLOWED_HOSTS:
    # The development default (localhost, testserver) is no answer for a public server.
    raise ImproperlyConfigured("Set ALLOWED_HOSTS to the shop's host names (comma-separated)")
# Origins other than the shop's own host that may POST forms, e.g. https://shop.example.com.
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

# --- Database ---------------------------------------------------------------------------------
# Connections are kept between requests: opening one per request costs more than the order it serves
# (docs/benchmarks.md, "HTTP baselines with wrk"); CONN_HEALTH_CHECKS retires a dead one first.
DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=60)

# --- HTTPS ------------------------------------------------------------------------------------

# Behind a proxy that terminates TLS every request arrives as plain HTTP, and SECURE_SSL_REDIRECT would
# redirect forever: name the header the proxy sets, e.g. SECURE_PROXY_SSL_HEADER=HTTP_X_FORWARDED_PROTO,https.
# Only if the proxy always sets or strips that header: otherwise a client could claim HTTPS itself.
SECURE_PROXY_SSL_HEADER = env.tuple("SECURE_PROXY_SSL_HEADER", default=None)
if SECURE_PROXY_SSL_HEADER is not None and len(SECURE_PROXY_SSL_HEADER) != 2:
    raise ImproperlyConfigured("SECURE_PROXY_SSL_HEADER is HEADER,value, e.g. HTTP_X_FORWARDED_PROTO,https")
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=True)
# A year, subdomains included, eligible for the browsers' preload list (submitting the domain there is a
# separate, deliberate step). Lower these only while first trying HTTPS out: browsers remember them.
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=31_536_000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=True)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=True)

# --- Cookies and headers ----------------------------------------------------------------------

SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=True)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=True)
# Django's defaults, pinned so that a change to config.settings cannot weaken production unnoticed.
SESSION_COOKIE_HTTPONLY = True
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
SECURE_CROSS_ORIGIN_OPENER_POLICY = "same-origin"
