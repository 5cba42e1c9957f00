"""Where one order's time goes, and how many round trips it costs (the figures in docs/benchmarks.md).

Call after Django is set up on the bench database (``python -m bench`` does).
"""

import uuid

from django.db import connection
from django.test.utils import CaptureQueriesContext
from pyinstrument import Profiler

from bench.redis_wire import redis_round_trips
from bench.reserve import shop_rows
from bench.shipping import ADDRESS, bench_shipping_method
from inventory.services import stock_reserve
from orders.services import order_place


def _place(skus, *, method: int):
    order_place(
        email="profile@example.com",
        items=[{"sku": sku, "quantity": 1} for sku in skus],
        idempotency_key=uuid.uuid4().hex,
        shipping_address=ADDRESS,
        shipping_method=method,
    )


def round_trips() -> list[list]:
    """SQL and Redis round trips of one uncontended order, for one SKU and for three."""
    rows, method = [], bench_shipping_method()
    for count in (1, 3):
        skus = [variant.sku for variant in shop_rows(count, 1000)]
        _place(skus, method=method)  # warm: scripts loaded, connections open
        with CaptureQueriesContext(connection) as queries, redis_round_trips() as redis:
            _place(skus, method=method)
        rows.append([f"order_place, {count} SKU{'s' if count > 1 else ''}", len(queries), _trips(redis)])
    variant = shop_rows(1, 1000)[0]
    _place([variant.sku], method=method)
    order = variant.reservations.get().order_line.order
    order = type(order).objects.prefetch_related("lines__variant").get(pk=order.pk)
    with CaptureQueriesContext(connection) as queries, redis_round_trips() as redis:
        stock_reserve(order=order, expires_at=order.expires_at)
    rows.append(["stock_reserve, 1 SKU, lines prefetched", len(queries), _trips(redis)])
    rows.append(["a batch of N queued one-SKU orders (holder)", "same as one order", "same: answers go with release"])
    return rows


def _trips(commands: list[str]) -> str:
    return f"{len(commands)}: {', '.join(commands)}"


def profile_order_place(*, orders: int) -> str:
    skus, method = [shop_rows(1, 10**7)[0].sku], bench_shipping_method()
    _place(skus, method=method)
    profiler = Profiler(interval=0.0005)
    with profiler:
        for _ in range(orders):
            _place(skus, method=method)
    return profiler.output_text(unicode=False, color=False, show_all=False, short_mode=True)
