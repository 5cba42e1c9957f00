"""The shop's own Prometheus metrics, counted where things happen and served at ``/metrics`` (config.metrics).

prometheus-client's objects, shared by every process of a host through ``PROMETHEUS_MULTIPROC_DIR``
(gunicorn's workers, Celery's, manage.py commands): each process writes its own file there and a
scrape adds them up. Request counts and latencies come from django-prometheus's middleware; what is
read from the database at each scrape (reservations active, the sweep's lag) from
``config.metrics``.
"""

from prometheus_client import Counter, Histogram

# Seconds from asking for a lock to holding it (or being served by its holder), by how it ended.
LOCK_WAIT = Histogram(
    "shop_lock_wait_seconds",
    "Time from asking for stock locks to holding them or being served by their holder.",
    ["outcome"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
# Requests one lock holder carried out in one transaction (group commit): 1 when nobody queued.
BATCH_SIZE = Histogram(
    "shop_batch_size",
    "Requests carried out in one lock hold and one commit (group commit).",
    ["kind"],
    buckets=(1, 2, 4, 8, 16, 32, 64, 128),
)
ORDERS_PLACED = Counter("shop_orders_placed", "Orders placed (replays of an idempotency key not counted).")
ORDERS_REFUSED = Counter("shop_orders_refused", "Orders refused, by the error code the buyer was told.", ["code"])
# Sections that found the lock service unreachable and locked the stock rows instead (inventory.locks.outage).
LOCK_SERVICE_FALLBACKS = Counter(
    "shop_lock_service_fallbacks", "Stock sections run under the database's row locks because Redis was unreachable."
)
# A holder whose guarded UPDATE found fewer units than it had read under its lock: its lock was lost.
GUARD_REFUSALS = Counter(
    "shop_guard_refusals", "Guarded UPDATEs that refused a lock holder whose read was stale (its lock was lost)."
)
# A lock whose TTL ran out before its holder released it: whatever the holder wrote, the guard decided.
LOCK_OVERRUNS = Counter("shop_lock_overruns", "Locks that expired before their holder released them.")
DRIFT_FOUND = Counter("shop_reconcile_drift_found", "Counters found by reconcile to disagree with the ledger.")
