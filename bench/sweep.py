"""How fast does the expiry sweep give stock back, and what do buyers of those SKUs feel meanwhile?

Overdue orders (100,000 by default) over 200 SKUs on MariaDB, each sweep on identical fresh data, side
by side in one run:
- ``batched x1`` / ``x4``: ``order_release_expired``, one or four sweepers (SELECT ... FOR UPDATE SKIP
  LOCKED shares the work), each claimed batch expired in one stock section (``order_list_expire``);
- ``one by one x1`` / ``x4``: the same with ``one_by_one``, each order in a section of its own: how the
  sweep ran before batches (its fallback now). It is run on ``--baseline-orders`` orders (its rate does
  not depend on how many wait) and its time to give back them all is that rate's;
- ``floor``: three set-based UPDATEs in one transaction, no locks, no ledger - what the database alone can do.

While each sweep runs, ``--buyers`` processes place one-unit orders on the swept SKUs: their p99 beside
the same buyers with no sweep running shows how long a sweep holds a SKU's lock.

    DATABASE_URL=mysql://root:@127.0.0.1:3306/shop REDIS_URL=redis://127.0.0.1:6379/0 python -m bench.sweep
"""

import argparse
import random
import time
from datetime import timedelta

from bench._db import empty_tables, use_bench_database
from bench.shipping import UNPRICED_ORDER

DATABASE = use_bench_database()

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import transaction  # noqa: E402
from django.db.models import F, OuterRef, Subquery, Sum  # noqa: E402
from django.db.models.functions import Coalesce  # noqa: E402
from django.utils import timezone  # noqa: E402

from bench.sweepers import Buyers, p99, sweepers_run  # noqa: E402
from inventory.models import LedgerCheckpoint, Reservation, Stock, StockMovement  # noqa: E402
from inventory.selectors import ledger_bases, stock_books  # noqa: E402
from orders.models import Order, OrderLine, new_order_number  # noqa: E402
from shop.models import Product, ProductVariant  # noqa: E402


def sku_names(count: int) -> list[str]:
    return [f"BENCH-{n:04d}" for n in range(count)]


def build(orders: int, skus: int) -> None:
    """Fresh catalog with ``orders`` overdue orders, books balanced (bulk inserts: this is a fixture)."""
    empty_tables(LedgerCheckpoint, StockMovement, Reservation, OrderLine, Order, Stock, ProductVariant, Product)
    rng = random.Random(7)
    now = timezone.now()
    product = Product.objects.create(name="Bench")
    variants = ProductVariant.objects.bulk_create(
        ProductVariant(product=product, sku=sku, name=sku, price=1, requires_shipping=False) for sku in sku_names(skus)
    )
    stocks = {
        p.pk: s for p, s in zip(variants, Stock.objects.bulk_create(Stock(variant=p) for p in variants), strict=True)
    }
    order_rows = Order.objects.bulk_create(
        Order(
            number=new_order_number(),
            email="bench@example.com",
            idempotency_key=f"bench-{n}",
            idempotency_key_hash=f"{n:064d}",
            idempotency_scope="email:bench@example.com",
            request_fingerprint="-",
            expires_at=now - timedelta(minutes=1),
            **UNPRICED_ORDER,
        )
        for n in range(orders)
    )
    lines = OrderLine.objects.bulk_create(
        OrderLine(order=o, variant=rng.choice(variants), quantity=(q := rng.randint(1, 3)), unit_price=1, line_total=q)
        for o in order_rows
    )
    reservations = Reservation.objects.bulk_create(
        Reservation(order_line=line, variant_id=line.variant_id, quantity=line.quantity, expires_at=now)
        for line in lines
    )
    movements = [StockMovement(stock=stocks[p.pk], kind="restock", on_hand_delta=10_000) for p in variants]
    movements += [
        StockMovement(
            stock=stocks[r.variant_id],
            kind="reserve",
            reserved_delta=r.quantity,
            order_id=r.order_line.order_id,
            reservation=r,
        )
        for r in reservations
    ]
    StockMovement.objects.bulk_create(movements, batch_size=2000)
    held = (
        Reservation.objects.filter(variant=OuterRef("variant"))
        .values("variant")
        .annotate(t=Sum("quantity"))
        .values("t")
    )
    Stock.objects.update(on_hand=10_000, reserved=Coalesce(Subquery(held), 0))
    assert not [row for row in stock_books() if row.drifted]


def floor() -> tuple[int, int]:
    with transaction.atomic():
        overdue = Order.objects.filter(status="awaiting_payment", expires_at__lte=timezone.now())
        ids = list(overdue.values_list("pk", flat=True))
        per_variant = Reservation.objects.filter(order_line__order__in=ids, state="active", variant=OuterRef("variant"))
        released = per_variant.values("variant").annotate(t=Sum("quantity")).values("t")
        Stock.objects.update(reserved=F("reserved") - Coalesce(Subquery(released), 0))
        Reservation.objects.filter(order_line__order__in=ids, state="active").update(
            state="released", release_reason="expired"
        )
        Order.objects.filter(pk__in=ids).update(status="expired")
    return len(ids), 5


def run_sweep(
    *, orders: int = 100_000, skus: int = 200, batch: int = 200, baseline_orders: int = 10_000, buyers: int = 2
) -> dict:
    """Each sweep on identical fresh data, by name: its seconds, the orders it released, the queries it sent
    (0 when several processes swept), the buyers' 99th-percentile latency in ms and their orders placed."""
    call_command("migrate", verbosity=0)
    baseline_orders = min(baseline_orders, orders)
    runs = {
        "batched x1": (orders, lambda: sweepers_run(1, batch=batch)),
        "batched x4": (orders, lambda: sweepers_run(4, batch=batch)),
        "one by one x1 (before batches)": (baseline_orders, lambda: sweepers_run(1, batch=batch, one_by_one=True)),
        "one by one x4 (before batches)": (baseline_orders, lambda: sweepers_run(4, batch=batch, one_by_one=True)),
        "floor": (orders, floor),
    }
    results, names = {}, sku_names(skus)
    build(baseline_orders, skus)
    with Buyers(buyers, names) as quiet:
        time.sleep(10)
    results["no sweep (buyers alone)"] = (10.0, 0, 0, p99(quiet.latencies), len(quiet.latencies))
    for name, (count, run) in runs.items():
        build(count, skus)
        with Buyers(buyers, names) as during:
            started = time.perf_counter()
            released, queries = run()
            seconds = time.perf_counter() - started
        results[name] = (seconds, released, queries, p99(during.latencies), len(during.latencies))
        assert released == count, (name, released)
        assert name == "floor" or not [row for row in stock_books(bases=ledger_bases(full=True)) if row.drifted], (
            name
        )  # no ledger
    return results


def sweep_table(results: dict, orders: int) -> list[str]:
    base = results["floor"][0]
    rows = [
        f"| sweep | orders | seconds | orders/s | {orders:,} back on sale in (s) | x floor time | queries per order "
        "| buyers' p99 ms (orders placed meanwhile) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, (seconds, released, queries, buyers_p99, placed) in results.items():
        if not released:
            rows.append(f"| {name} | - | - | - | - | - | - | {buyers_p99:.1f} ({placed:,}) |")
            continue
        per_order = "5 in all" if name == "floor" else (f"{queries / released:.2f}" if queries else "-")
        back = orders / (released / seconds)
        rows.append(
            f"| {name} | {released:,} | {seconds:.1f} | {released / seconds:,.0f} | {'~' if released < orders else ''}"
            f"{back:.0f} | {seconds / base * orders / released:.1f} | {per_order} | {buyers_p99:.1f} ({placed:,}) |"
        )
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=100_000)
    parser.add_argument("--baseline-orders", type=int, default=10_000)
    parser.add_argument("--skus", type=int, default=200)
    parser.add_argument("--batch", type=int, default=200)
    parser.add_argument("--buyers", type=int, default=2)
    args = parser.parse_args()
    results = run_sweep(
        orders=args.orders,
        skus=args.skus,
        batch=args.batch,
        baseline_orders=args.baseline_orders,
        buyers=args.buyers,
    )
    print(f"MariaDB, database {DATABASE}, overdue orders over {args.skus} SKUs, batch {args.batch}\n")
    print("\n".join(sweep_table(results, args.orders)))


if __name__ == "__main__":
    main()
