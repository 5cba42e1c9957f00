"""Settings, read from the environment with safe defaults.

With no DATABASE_URL and no REDIS_URL the shop runs in *embedded* mode: a SQLite file and an
embedded Redis server (see ``config/embedded_redis.py``) that ``bin/run`` starts,
so every process shares one lock store and runs the same code path as in production.
"""

import ipaddress
import re
import urllib.parse
from datetime import timedelta
from pathlib import Path

import environ
from csp.constants import NONE, SELF

from config.development_key import development_secret_key
from config.embedded_redis import embedded_dir, embedded_urls
from config.media import media_origins

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()

# Where the zero-configuration mode keeps its files (a path relative to the checkout, or absolute): the
# SQLite file, the embedded Redis's socket and password, the development secret key; bin/run's logs.
VAR_DIR = BASE_DIR / env("VAR_DIR", default="var")
# The embedded mode: neither store configured (bin/run with nothing set, and manage.py beside it).
EMBEDDED = (
    not env("DATABASE_URL", default="") and not env("REDIS_URL", default="") and not env("REDIS_SENTINELS", default="")
)

# --- Core -------------------------------------------------------------------------------------

DEBUG = env.bool("DEBUG", default=False)
# Set by config.settings_production, under which each app refuses to start with what production forbids.
PRODUCTION = False
SECRET_KEY = env("SECRET_KEY", default="")
if not SECRET_KEY:
    if not (DEBUG or EMBEDDED):
        # A shop on real stores is served to others: it needs a key of its own, set where it is deployed.
        raise environ.ImproperlyConfigured(
            "Set SECRET_KEY (only DEBUG=1 or the embedded mode, with neither DATABASE_URL nor REDIS_URL, make one)"
        )
    # This checkout's own random key, kept in VAR_DIR (mode 0600): bin/run's processes and the commands run
    # beside them share it. config.settings_production refuses both DEBUG and the embedded mode.
    SECRET_KEY = development_secret_key(VAR_DIR)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]", "testserver"])

DJANGO_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
]
THIRD_PARTY_APPS = [
    "rest_framework",
    "knox",
    "csp",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_countries",
    "treebeard",
    "health_check",
    "django_prometheus",
]
LOCAL_APPS = [
    "core",
    "tax",
    "shipping",
    "shop",
    "inventory",
    "vouchers",
    "drops",
    "orders",
    "payments",
    "fulfilment",
    "accounts",
    "demo",
]
INSTALLED_APPS = DJANGO_APPS + THIRD_PARTY_APPS + LOCAL_APPS

# django-prometheus's pair wraps every other middleware: request counts and latencies for /metrics.
MIDDLEWARE = [
    "django_prometheus.middleware.PrometheusBeforeMiddleware",
    "core.logcontext.request_id_middleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
    "config.error_views.api_errors_middleware",
    "django_prometheus.middleware.PrometheusAfterMiddleware",
]
# Who may read /metrics besides staff (config.metrics): a scraper sending "Authorization: Bearer <token>",
# or one connecting from these networks (CIDRs; the connection's own address, never a forwarded one).
METRICS_TOKEN = env("METRICS_TOKEN", default="")
METRICS_ALLOWED_NETWORKS = [
    entry.strip() for entry in env.list("METRICS_ALLOWED_NETWORKS", default=[]) if entry.strip()
]
for _network in METRICS_ALLOWED_NETWORKS:
    try:
        ipaddress.ip_network(_network)  # strict: 10.0.0.1/8 has host bits set, and is refused
    except ValueError as _error:
        # Refused at start: checked per scrape, a typo would answer every scrape with a 500.
        raise environ.ImproperlyConfigured(
            f"METRICS_ALLOWED_NETWORKS: {_network!r} is not a network ({_error})"
        ) from None
# The probes answer plain HTTP under SECURE_SSL_REDIRECT (config.settings_production): a load balancer or
# Prometheus reaches the app server itself, over HTTP, and a 301 to HTTPS is never the 200 it waits for.
SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^readyz$", r"^metrics$"]
# Content-Security-Policy (django-csp): every script and style comes from the shop's own static files,
# none inline, so an injected <script> or style attribute does not run. The pages, the admin and the
# API docs (drf-spectacular's split view, its init script served by URL) work under it.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": [SELF],
        "script-src": [SELF],
        "style-src": [SELF],
        "img-src": [SELF, "data:"],
        "font-src": [SELF],
        "connect-src": [SELF],
        "object-src": [NONE],
        "base-uri": [NONE],
        "frame-ancestors": [NONE],
        "form-action": [SELF],
    }
}

ROOT_URLCONF = "config.urls"
# Debug pages and error reports mask the stores' URLs too, not only settings named like secrets.
DEFAULT_EXCEPTION_REPORTER_FILTER = "config.error_views.CredentialFilter"
WSGI_APPLICATION = "config.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "shop.context_processors.cart",
            ],
            # {{ amount|money }} in every template and email
            "builtins": ["core.templatetags.money"],
        },
    },
]

# --- Database ---------------------------------------------------------------------------------
# No ATOMIC_REQUESTS: a request-wide transaction would commit *after* the service released its
# stock lock. The inventory service opens its own (durable) transaction inside the lock.

DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{env('SQLITE_PATH', default=str(VAR_DIR / 'db.sqlite3'))}"),
}
DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=0)
# A kept connection is checked before each request reuses it, so a database restart costs no request.
DATABASES["default"]["CONN_HEALTH_CHECKS"] = env.bool("CONN_HEALTH_CHECKS", default=True)
if DATABASES["default"]["ENGINE"] == "django.db.backends.mysql":
    DATABASES["default"]["OPTIONS"] = {
        "charset": "utf8mb4",
        # Strict mode: out-of-range or truncated values are errors, never silently clipped.
        # UTC sessions: the database's clock (CURRENT_TIMESTAMP) is the one expiry decisions use (core/clock.py).
        "init_command": "SET sql_mode='STRICT_TRANS_TABLES,NO_ZERO_DATE,NO_ZERO_IN_DATE,ERROR_FOR_DIVISION_BY_ZERO', "
        "time_zone='+00:00'",
        # READ COMMITTED: every statement sees the latest committed row, so the next lock holder
        # never works from a snapshot older than the previous holder's commit (see docs/design.md).
        "isolation_level": "read committed",
    }
    DATABASES["default"]["TEST"] = {"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"}
    # Django's backend, minus the autocommit switches between back-to-back transactions (config/mysql).
    DATABASES["default"]["ENGINE"] = "config.mysql"
elif DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # Several processes (web, workers) share the file: wait for the writer instead of failing.
    DATABASES["default"]["OPTIONS"] = {"timeout": 20, "transaction_mode": "IMMEDIATE"}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# --- Redis: cache and locks -------------------------------------------------------------------

# Redis Sentinel instead of one address: the sentinels as host:port, comma-separated, and the name they
# monitor. Locks, cache and the Celery broker then follow the primary through a failover (django-redis's
# SentinelClient, kombu's sentinel transport); docs/deploy.md says what a failover costs.
REDIS_SENTINELS = [
    (host, int(port)) for host, _, port in (item.rpartition(":") for item in env.list("REDIS_SENTINELS", default=[]))
]
REDIS_SENTINEL_MASTER = env("REDIS_SENTINEL_MASTER", default="")
if REDIS_SENTINELS and not REDIS_SENTINEL_MASTER:
    raise environ.ImproperlyConfigured("REDIS_SENTINELS needs REDIS_SENTINEL_MASTER, the name the sentinels monitor")
REDIS_MODE = "redis" if env("REDIS_URL", default="") or REDIS_SENTINELS else "embedded"
if REDIS_SENTINELS:
    REDIS_URL = f"redis://{REDIS_SENTINEL_MASTER}/{env.int('REDIS_SENTINEL_DB', default=0)}"
    redis_broker_url = ";".join(f"sentinel://{host}:{port}" for host, port in REDIS_SENTINELS)
    redis_options = {
        "CLIENT_CLASS": "django_redis.client.SentinelClient",
        "CONNECTION_FACTORY": "django_redis.pool.SentinelConnectionFactory",
        "SENTINELS": REDIS_SENTINELS,
    }
elif REDIS_MODE == "redis":
    REDIS_URL = redis_broker_url = env("REDIS_URL")
    redis_options = {}
else:  # the server bin/run starts, on a unix socket in var/ with a password kept beside it
    REDIS_URL, redis_broker_url = embedded_urls(embedded_dir(BASE_DIR))
    redis_options = {}

CACHES = {
    # Ordinary caching may degrade quietly when Redis blips.
    "default": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": "shop",
        "OPTIONS": {
            **redis_options,
            "IGNORE_EXCEPTIONS": True,
            "SOCKET_CONNECT_TIMEOUT": 2,
            "SOCKET_TIMEOUT": 2,
            # JSON, not django-redis's default pickle: a value planted in Redis must never run as code.
            "SERIALIZER": "django_redis.serializers.json.JSONSerializer",
        },
    },
    # Locks must never degrade quietly: a Redis failure raises instead of yielding "no lock".
    "locks": {
        "BACKEND": "django_redis.cache.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": env("LOCK_KEY_PREFIX", default="shop"),
        "OPTIONS": {
            **redis_options,
            "IGNORE_EXCEPTIONS": False,
            "SOCKET_CONNECT_TIMEOUT": 2,
            "SOCKET_TIMEOUT": 5,
            "SERIALIZER": "django_redis.serializers.json.JSONSerializer",
        },
    },
}
LOCK_CACHE_ALIAS = "locks"

# --- Drops --------------------------------------------------------------------------------------------
# How many buyers a drop's line admits a second (each admission places a hold): at most what the shop
# serves in orders placed a second (bin/drop measures both), so admitted buyers are never the ones
# who wait for a lock. Every drop's runner pass shares it (``orders.services.holding``).
DROP_ADMISSIONS_PER_SECOND = env.float("DROP_ADMISSIONS_PER_SECOND", default=50.0)
# How often the line's runner (``manage.py drop_line``) passes: admits, publishes the news.
DROP_LINE_PASS_SECONDS = env.float("DROP_LINE_PASS_SECONDS", default=0.2)
# Where the waiting pages listen for the lines' news (server-sent events from ``uvicorn config.push:app``,
# beside gunicorn): a path the proxy routes to it, or its own origin (bin/run's, added to the CSP's
# connect-src). Empty: the pages read the shared news answer every 2 s instead.
DROP_EVENTS_URL = env("DROP_EVENTS_URL", default="")
# Signs the line's passes (cookie and API token): a pass names a drop and a place.
DROP_PASS_MAX_AGE_SECONDS = env.int("DROP_PASS_MAX_AGE_SECONDS", default=2 * 86_400)

# --- Stock and orders -------------------------------------------------------------------------

RESERVATION_TTL_SECONDS = env.int("RESERVATION_TTL_SECONDS", default=900)
# How long after its expiry an order may still be paid as placed (at unchanged prices, if the stock allows).
EXPIRED_ORDER_PAYABLE_SECONDS = env.int("EXPIRED_ORDER_PAYABLE_SECONDS", default=3600)
# Whether refunding a paid order gives its voucher's use back (a customer may use the code again).
VOUCHER_RELEASE_ON_REFUND = env.bool("VOUCHER_RELEASE_ON_REFUND", default=False)
# Hosts' clocks may disagree, so expiry runs on the database's clock; each process re-reads it this often
# and counts the time between on its monotonic clock (core/clock.py).
DB_CLOCK_RESYNC_SECONDS = env.float("DB_CLOCK_RESYNC_SECONDS", default=60.0)
# How long a lock lives if its holder dies. Must exceed the slowest stock transaction.
LOCK_TTL_SECONDS = env.float("LOCK_TTL_SECONDS", default=10.0)
# How long a caller waits for a busy SKU before giving up with `lock_timeout`.
LOCK_WAIT_SECONDS = env.float("LOCK_WAIT_SECONDS", default=5.0)
# A release wakes the next waiter at once; this poll only catches locks that expired unreleased
# (a crashed holder). Polling as the main wait costs latency and CPU: see bench/lock_wait.py.
LOCK_POLL_SECONDS = env.float("LOCK_POLL_SECONDS", default=0.2)
# A released lock is handed to the next waiter for this long; a waiter that died in the queue costs
# at most this much. Must cover a live waiter waking up on a busy machine.
LOCK_HANDOFF_CLAIM_SECONDS = env.float("LOCK_HANDOFF_CLAIM_SECONDS", default=0.5)
# While Redis cannot be reached, sections lock the stock rows in the database and go on selling
# (inventory.locks.outage); False refuses them with lock_unavailable instead. After a failure a process
# tries Redis again only after LOCK_OUTAGE_RETRY_SECONDS, then goes back to its locks when it answers.
LOCK_DB_FALLBACK = env.bool("LOCK_DB_FALLBACK", default=True)
LOCK_OUTAGE_RETRY_SECONDS = env.float("LOCK_OUTAGE_RETRY_SECONDS", default=1.0)
# The socket timeout of the connection a queued buyer waits on. A buyer whose request the holder took
# waits there for the answer as long as the holder may still commit (a TTL), so it must outlast the TTL
# (system check inventory.E001); every other lock command keeps the `locks` cache's shorter timeout.
LOCK_WAIT_SOCKET_TIMEOUT_SECONDS = env.float("LOCK_WAIT_SOCKET_TIMEOUT_SECONDS", default=LOCK_TTL_SECONDS + 5)
# Waits longer than this are logged so operators see hot SKUs.
LOCK_WAIT_LOG_SECONDS = env.float("LOCK_WAIT_LOG_SECONDS", default=0.5)

if min(LOCK_TTL_SECONDS, LOCK_WAIT_SECONDS, LOCK_POLL_SECONDS, LOCK_HANDOFF_CLAIM_SECONDS) <= 0:
    # A TTL of 0/None would make a crashed holder block its SKU forever.
    raise environ.ImproperlyConfigured("LOCK_*_SECONDS settings must be > 0")

MAX_LINE_QUANTITY = env.int("MAX_LINE_QUANTITY", default=1000)
MAX_ORDER_LINES = env.int("MAX_ORDER_LINES", default=50)
# How many queued one-SKU requests a lock holder serves in one transaction (inventory.batching):
# at most MAX; a holder handed the lock serves those queued behind it then, or up to MIN if fewer were.
STOCK_BATCH_MAX = env.int("STOCK_BATCH_MAX", default=64)
STOCK_BATCH_MIN = env.int("STOCK_BATCH_MIN", default=16)
if not 1 <= STOCK_BATCH_MIN <= STOCK_BATCH_MAX:
    raise environ.ImproperlyConfigured("STOCK_BATCH_MIN must be between 1 and STOCK_BATCH_MAX")
MAX_STOCK_QUANTITY = env.int("MAX_STOCK_QUANTITY", default=1_000_000_000)
# How long a SKU's sold-out mark lives (inventory.locks.soldout): a sell-out is answered without the lock
# meanwhile; a mark left by a crash refuses for at most this long. 0 turns the marks off.
SOLD_OUT_MARK_SECONDS = env.float("SOLD_OUT_MARK_SECONDS", default=5)
# Unpaid orders a guest may keep open per browser session and per client address.
GUEST_MAX_OPEN_ORDERS_PER_CLIENT = env.int("GUEST_MAX_OPEN_ORDERS_PER_CLIENT", default=3)

# --- Payments (payments.providers) ---------------------------------------------------------------
# Each provider's class, by the name its payments and its webhook endpoint (/payments/<name>/webhook/)
# carry; docs/configuration.md's "Payment providers" says what each is. PAYMENT_PROVIDER is the one new
# checkouts use ("local", a pay / decline page in the shop, for development, tests and demos: production
# refuses it). A payment is refunded through the provider it was made with. Each provider's own settings
# are one block below, after the currency and tax.
PAYMENT_PROVIDERS = {
    "stripe": "payments.providers.stripe.StripeProvider",
    "local": "payments.providers.local.LocalProvider",
}
PAYMENT_PROVIDER = env("PAYMENT_PROVIDER", default="") or "local"
if PAYMENT_PROVIDER not in PAYMENT_PROVIDERS:
    raise environ.ImproperlyConfigured(f"PAYMENT_PROVIDER must be one of {', '.join(PAYMENT_PROVIDERS)}")
SHOP_CURRENCY = env("SHOP_CURRENCY", default="EUR").upper()
if not re.fullmatch(r"[A-Z]{3}", SHOP_CURRENCY):
    raise environ.ImproperlyConfigured("SHOP_CURRENCY must be an ISO 4217 code such as EUR, USD or JPY")
# Tax (orders.pricing; rates per country are staff's, in the admin). Prices are entered including tax
# (as shops selling to consumers in the EU show them) or excluding it (added at checkout, as in the US).
PRICES_INCLUDE_TAX = env.bool("PRICES_INCLUDE_TAX", default=True)
# Shipping is taxed at the destination's default rate (as EU VAT requires), or not at all.
SHIPPING_TAXED = env.bool("SHIPPING_TAXED", default=True)
# Where the shop is: the tax country of an order that ships nothing and gives no billing address.
SHOP_COUNTRY = env("SHOP_COUNTRY", default="DE").upper()
if not re.fullmatch(r"[A-Z]{2}", SHOP_COUNTRY):
    raise environ.ImproperlyConfigured("SHOP_COUNTRY must be an ISO 3166 code such as DE, US or JP")
# Stripe (payments.providers.stripe): its secret API key, and the webhook endpoint's secret, from which
# the local provider derives its own; that secret's default is for development only (production refuses it).
STRIPE_SECRET_KEY = env("STRIPE_SECRET_KEY", default="")
LOCAL_STRIPE_WEBHOOK_SECRET = "whsec_local_development_only"
STRIPE_WEBHOOK_SECRET = env("STRIPE_WEBHOOK_SECRET", default="") or LOCAL_STRIPE_WEBHOOK_SECRET
STRIPE_API_BASE = env("STRIPE_API_BASE", default="https://api.stripe.com")
# The local provider (payments.providers.local): where it sends its webhooks, this shop's endpoint.
LOCAL_PAYMENTS_WEBHOOK_URL = env(
    "LOCAL_PAYMENTS_WEBHOOK_URL", default=f"http://127.0.0.1:{env.int('PORT', default=8000)}/payments/local/webhook/"
)
# --- Email ------------------------------------------------------------------------------------
# How mail leaves: EMAIL_URL, e.g. smtp+tls://user:password@smtp.example.com:587 (django-environ's
# email URL); the default prints each email on the worker's console.
vars().update(env.email_url("EMAIL_URL", default="consolemail://"))
DEFAULT_FROM_EMAIL = env("DEFAULT_FROM_EMAIL", default="shop@localhost")
# The shop's public address, for the links in emails.
SHOP_URL = env("SHOP_URL", default=f"http://127.0.0.1:{env.int('PORT', default=8000)}")
# Order emails are sent by a beat task from the orders' states (fulfilment.emails): this often, for
# orders changed within the window.
ORDER_EMAIL_SWEEP_SECONDS = env.float("ORDER_EMAIL_SWEEP_SECONDS", default=5)
ORDER_EMAIL_WINDOW_SECONDS = env.int("ORDER_EMAIL_WINDOW_SECONDS", default=24 * 3600)
# An emailed order link shows the order (never pays or cancels it) for this long after it was sent.
ORDER_LINK_MAX_AGE_SECONDS = env.int("ORDER_LINK_MAX_AGE_SECONDS", default=3 * 24 * 3600)
if ORDER_LINK_MAX_AGE_SECONDS <= 0:
    raise environ.ImproperlyConfigured("ORDER_LINK_MAX_AGE_SECONDS must be positive: every order link would be expired")

# A stored webhook event not processed this long after it arrived (its task was lost) is processed by a sweep.
PAYMENT_EVENT_SWEEP_AFTER_SECONDS = env.float("PAYMENT_EVENT_SWEEP_AFTER_SECONDS", default=60)
# An event that names a payment not found yet (a refund that overtook its success) is tried again by that
# sweep until it is this old, then ignored.
PAYMENT_EVENT_MATCH_SECONDS = env.float("PAYMENT_EVENT_MATCH_SECONDS", default=24 * 3600)

# --- API ------------------------------------------------------------------------------------------

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "core.tokens.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PAGINATION_CLASS": "config.api.Pagination",
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "config.api.exception_handler",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["core.api.JSONParser"],
    # How many proxies in front of us append to X-Forwarded-For: throttles key on the client address
    # they report. 0 trusts only REMOTE_ADDR, so a client cannot dodge a per-IP limit by sending the header.
    "NUM_PROXIES": env.int("NUM_PROXIES", default=0),
}
# API tokens (django-rest-knox, core.tokens): sent as "Authorization: Token <token>", stored only as a
# hash, valid this long after login; revoked by POST /api/auth/token/revoke/ and by a password change.
API_TOKEN_TTL_SECONDS = env.int("API_TOKEN_TTL_SECONDS", default=24 * 3600)
if API_TOKEN_TTL_SECONDS <= 0:
    raise environ.ImproperlyConfigured("API_TOKEN_TTL_SECONDS must be positive: every token would be expired")
# Admin change lists over tables that grow with history count at most this many rows (core.admin).
LIST_COUNT_LIMIT = env.int("LIST_COUNT_LIMIT", default=10_000)
# Live API tokens a user keeps; a new login beyond it revokes the oldest (core.services.api_token_create).
API_TOKENS_PER_USER = env.int("API_TOKENS_PER_USER", default=10)
REST_KNOX = {
    "TOKEN_TTL": timedelta(seconds=API_TOKEN_TTL_SECONDS),
    "AUTH_HEADER_PREFIX": "Token",
    "AUTO_REFRESH": False,
}
# Orders one customer may place per minute through the API (DRF rate syntax).
ORDER_THROTTLE_RATE = env("ORDER_THROTTLE_RATE", default="30/minute")
# Failed logins allowed per client IP and, separately, per username (token API, login page and admin
# together; core.throttling.LoginThrottle), so a password is guessed neither from one address nor from many.
LOGIN_THROTTLE_RATE = env("LOGIN_THROTTLE_RATE", default="10/minute")
# Refused voucher codes allowed per client IP and, separately, per account (the quote, the checkout page
# and placing together; core.throttling.VoucherThrottle), so codes are not found by trying them.
VOUCHER_THROTTLE_RATE = env("VOUCHER_THROTTLE_RATE", default="20/hour")

SPECTACULAR_SETTINGS = {
    "TITLE": "Shop API",
    "DESCRIPTION": "Catalog, orders that reserve stock, payment and staff stock editing. Every refusal "
    "has the shape {code, detail, fields}.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    # Two "state" enums: a place's in a drop's line, and the line's own.
    "ENUM_NAME_OVERRIDES": {
        "DropPlaceStateEnum": "drops.apis.PLACE_STATES",
        "DropLineStateEnum": "drops.apis.LINE_STATES",
    },
}

# --- Celery -----------------------------------------------------------------------------------
# A static beat schedule (not django-celery-beat): the sweeps are part of the product, so their
# schedule is code, reviewed in git and tuned by environment; beat needs no tables, and there is no
# second, database-held copy of the schedule to drift from it.

CELERY_BROKER_URL = env("CELERY_BROKER_URL", default=redis_broker_url)
CELERY_BROKER_TRANSPORT_OPTIONS = {
    # An unacknowledged task (its worker died) is delivered again after this long. Sweeps are
    # idempotent and beat sends a new one every period anyway.
    "visibility_timeout": env.int("CELERY_VISIBILITY_TIMEOUT", default=3600),
}
if REDIS_SENTINELS:
    CELERY_BROKER_TRANSPORT_OPTIONS["master_name"] = REDIS_SENTINEL_MASTER
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True  # a task is acknowledged only once it has run...
CELERY_TASK_REJECT_ON_WORKER_LOST = True  # ...and requeued if its worker process dies mid-run
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = env.int("CELERY_TASK_SOFT_TIME_LIMIT", default=240)
CELERY_TASK_TIME_LIMIT = env.int("CELERY_TASK_TIME_LIMIT", default=300)
CELERY_TIMEZONE = "UTC"
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True

EXPIRY_SWEEP_SECONDS = env.float("EXPIRY_SWEEP_SECONDS", default=30)
RECONCILE_SECONDS = env.float("RECONCILE_SECONDS", default=600)
# A ledger checkpoint covers movements at least this old: longer than any transaction lives.
LEDGER_CHECKPOINT_MARGIN_SECONDS = env.float("LEDGER_CHECKPOINT_MARGIN_SECONDS", default=300)
if LEDGER_CHECKPOINT_MARGIN_SECONDS < 60:
    raise environ.ImproperlyConfigured(
        "LEDGER_CHECKPOINT_MARGIN_SECONDS must be at least 60: a checkpoint must never cover a movement still to commit"
    )
SWEEP_BATCH_SIZE = env.int("SWEEP_BATCH_SIZE", default=200)
# Overdue orders expired in one stock section: every buyer of their SKUs waits for one section at most.
SWEEP_SECTION_ORDERS = env.int("SWEEP_SECTION_ORDERS", default=25)
if SWEEP_SECTION_ORDERS < 1:
    raise environ.ImproperlyConfigured("SWEEP_SECTION_ORDERS must be at least 1")
# A sweeper claims a batch for this long; if it dies, another sweeper takes the batch over afterwards.
SWEEP_LEASE_SECONDS = env.float("SWEEP_LEASE_SECONDS", default=60)
# A sweeper waits this little for a SKU (a payment may be in flight) and otherwise retries later.
SWEEP_LOCK_WAIT_SECONDS = env.float("SWEEP_LOCK_WAIT_SECONDS", default=1.0)

# A charge neither applied nor refunded this long after it was recorded (its payer died, or lost the
# database at its commit) is settled by the payment sweep: applied if its order can still be paid, else refunded.
PAYMENT_SETTLE_AFTER_SECONDS = env.float("PAYMENT_SETTLE_AFTER_SECONDS", default=120)

# Rows kept only for a while (orders.services.pruning, core.services): expired API tokens and sessions,
# processed payment events and records of emails sent; pruned every PRUNE_SECONDS.
PRUNE_SECONDS = env.float("PRUNE_SECONDS", default=3600)
PAYMENT_EVENT_KEEP_DAYS = env.int("PAYMENT_EVENT_KEEP_DAYS", default=30)
ORDER_EMAIL_KEEP_DAYS = env.int("ORDER_EMAIL_KEEP_DAYS", default=30)
if PAYMENT_EVENT_KEEP_DAYS * 86400 < max(PAYMENT_EVENT_MATCH_SECONDS, 3 * 86400):
    raise environ.ImproperlyConfigured(
        "PAYMENT_EVENT_KEEP_DAYS must cover Stripe's 3 days of redelivery and PAYMENT_EVENT_MATCH_SECONDS"
    )
if ORDER_EMAIL_KEEP_DAYS * 86400 <= ORDER_EMAIL_WINDOW_SECONDS:
    raise environ.ImproperlyConfigured("ORDER_EMAIL_KEEP_DAYS must outlast ORDER_EMAIL_WINDOW_SECONDS")
CELERY_BEAT_SCHEDULE = {
    "expire-overdue-orders": {"task": "orders.tasks.sweep_expired_orders", "schedule": EXPIRY_SWEEP_SECONDS},
    "release-failed-payments": {"task": "orders.tasks.sweep_failed_payments", "schedule": EXPIRY_SWEEP_SECONDS},
    "settle-payments": {"task": "orders.tasks.settle_payments", "schedule": EXPIRY_SWEEP_SECONDS},
    "process-payment-events": {"task": "orders.tasks.sweep_payment_events", "schedule": EXPIRY_SWEEP_SECONDS},
    "expire-unpayable-checkouts": {"task": "orders.tasks.sweep_unpayable_checkouts", "schedule": EXPIRY_SWEEP_SECONDS},
    "send-order-emails": {"task": "orders.tasks.send_order_emails", "schedule": ORDER_EMAIL_SWEEP_SECONDS},
    "reconcile-stock": {"task": "orders.tasks.reconcile_stock", "schedule": RECONCILE_SECONDS},
    "prune-history": {"task": "orders.tasks.prune_history", "schedule": PRUNE_SECONDS},
}

# --- Auth, i18n, static -----------------------------------------------------------------------

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Log in by username or email (``accounts.backends``).
AUTHENTICATION_BACKENDS = ["accounts.backends.EmailOrUsernameBackend"]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "catalog"
# How long the link a sign-up is emailed stays good, and a password reset link (Django's setting).
ACCOUNT_VERIFY_MAX_AGE_SECONDS = env.int("ACCOUNT_VERIFY_MAX_AGE_SECONDS", default=3 * 24 * 3600)
PASSWORD_RESET_TIMEOUT = env.int("PASSWORD_RESET_TIMEOUT", default=24 * 3600)
if min(ACCOUNT_VERIFY_MAX_AGE_SECONDS, PASSWORD_RESET_TIMEOUT) <= 0:
    raise environ.ImproperlyConfigured("ACCOUNT_VERIFY_MAX_AGE_SECONDS and PASSWORD_RESET_TIMEOUT must be positive")
LOGOUT_REDIRECT_URL = "catalog"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
# Set STATIC_ROOT to run collectstatic; without it WhiteNoise serves the apps' static files directly.
STATIC_ROOT = env("STATIC_ROOT", default=None)
WHITENOISE_USE_FINDERS = True

# Product images go through Django's storage API: local files under MEDIA_ROOT by default (served by the
# shop itself, config/urls.py), or an S3-compatible store with MEDIA_STORAGE=s3 (docs/configuration.md).
MEDIA_URL = env("MEDIA_URL", default="media/")
MEDIA_ROOT = env("MEDIA_ROOT", default=str(VAR_DIR / "media"))
if env("MEDIA_STORAGE", default="local") == "s3":
    _media_storage = {
        "BACKEND": "storages.backends.s3.S3Storage",
        "OPTIONS": {
            "bucket_name": env("MEDIA_S3_BUCKET"),
            "endpoint_url": env("MEDIA_S3_ENDPOINT_URL", default=None),
            "access_key": env("MEDIA_S3_ACCESS_KEY", default=None),
            "secret_key": env("MEDIA_S3_SECRET_KEY", default=None),
            "region_name": env("MEDIA_S3_REGION", default=None),
            "custom_domain": env("MEDIA_S3_CUSTOM_DOMAIN", default=None),
            "querystring_auth": False,
        },
    }
else:
    _media_storage = {"BACKEND": "django.core.files.storage.FileSystemStorage"}
STORAGES = {
    "default": _media_storage,
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
}
# Images served from elsewhere (an S3 store, a CDN) are the shop's own: the policy lets the pages show them.
CONTENT_SECURITY_POLICY["DIRECTIVES"]["img-src"] += media_origins(media_url=MEDIA_URL, storage=STORAGES["default"])
if DROP_EVENTS_URL.startswith(("http://", "https://")):  # the push process on its own origin (bin/run's)
    _events = urllib.parse.urlsplit(DROP_EVENTS_URL)
    CONTENT_SECURITY_POLICY["DIRECTIVES"]["connect-src"].append(f"{_events.scheme}://{_events.netloc}")
# Uploads larger than this are refused before Pillow opens them; so are images of more pixels.
PRODUCT_IMAGE_MAX_BYTES = env.int("PRODUCT_IMAGE_MAX_BYTES", default=10 * 1024 * 1024)
PRODUCT_IMAGE_MAX_PIXELS = env.int("PRODUCT_IMAGE_MAX_PIXELS", default=40_000_000)

# --- Logging ----------------------------------------------------------------------------------

# "text" for people, "json" for log collectors: one object per line with the request id, and the order and
# SKU a line is about (core.logcontext).
LOG_FORMAT = env("LOG_FORMAT", default="text")
if LOG_FORMAT not in ("text", "json"):
    raise environ.ImproperlyConfigured("LOG_FORMAT is text or json")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(process)d %(message)s"},
        "json": {
            "()": "pythonjsonlogger.json.JsonFormatter",
            "fmt": "%(levelname)s %(name)s %(message)s %(process)d",
            "rename_fields": {"levelname": "level", "name": "logger"},
            "timestamp": "time",
        },
    },
    "filters": {"context": {"()": "core.logcontext.LogContextFilter"}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"}
        if LOG_FORMAT == "text"
        else {"class": "logging.StreamHandler", "formatter": "json", "filters": ["context"]}
    },
    "root": {"handlers": ["console"], "level": env("LOG_LEVEL", default="INFO")},
}
