"""How fast does the expiry sweep give stock back? 10,000 expired orders on MariaDB.

Side by side in one run, on identical fresh data:
- ``ours x1``: one sweeper (``order_release_expired``: leased batches, per-order lock + transaction);
- ``ours x4``: four sweepers at once (SELECT ... FOR UPDATE SKIP LOCKED shares the work);
- ``floor``: three set-based UPDATEs in one transaction, no locks, no ledger - what the database alone can do.

    DATABASE_URL=mysql://root:@127.0.0.1:3306/shop REDIS_URL=redis://127.0.0.1:6379/0 python -m bench.sweep
"""

import argparse
import multiprocessing
import random
import time
from datetime import timedelta

from bench._db import empty_tables, use_bench_database
from bench.shipping import UNPRICED_ORDER

DATABASE = use_bench_database()

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, connections, transaction  # noqa: E402
from django.db.models import F, OuterRef, Subquery, Sum  # noqa: E402
from django.db.models.functions import Coalesce  # noqa: E402
from django.utils import timezone  # noqa: E402

from inventory.models import Reservation, Stock, StockMovement  # noqa: E402
from inventory.selectors import stock_books  # noqa: E402
from orders.models import Order, OrderLine, new_order_number  # noqa: E402
from orders.services import order_release_expired  # noqa: E402
from shop.models import Product, ProductVariant  # noqa: E402


def build(orders: int, skus: int) -> None:
    """Fresh catalog with ``orders`` overdue orders, books balanced (bulk inserts: this is a fixture)."""
    empty_tables(StockMovement, Reservation, OrderLine, Order, Stock, ProductVariant, Product)
    rng = random.Random(7)
    now = timezone.now()
    product = Product.objects.create(name="Bench")
    variants = ProductVariant.objects.bulk_create(
        ProductVariant(product=product, sku=f"BENCH-{n:04d}", name=f"Bench {n}", price=1) for n in range(skus)
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


def ours(workers: int, batch: int) -> tuple[int, int]:
    """Returns (orders released, queries issued by the single-sweeper run or 0)."""
    if workers == 1:
        queries = []
        with connection.execute_wrapper(lambda execute, sql, *args: queries.append(sql) or execute(sql, *args)):
            done = order_release_expired(batch_size=batch).done
        return done, len(queries)
    connections.close_all()
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        return sum(pool.map(_sweep, [batch] * workers)), 0


def _sweep(batch: int) -> int:
    connections.close_all()
    return order_release_expired(batch_size=batch).done


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


def run_sweep(*, orders: int = 10_000, skus: int = 200, batch: int = 200) -> dict:
    """Each sweep on identical fresh data: {name: (seconds, orders released, queries or 0)}."""
    call_command("migrate", verbosity=0)
    runs = {"ours x1": lambda: ours(1, batch), "ours x4": lambda: ours(4, batch), "floor": floor}
    results = {}
    for name, run in runs.items():
        build(orders, skus)
        started = time.perf_counter()
        released, queries = run()
        results[name] = (time.perf_counter() - started, released, queries)
        assert released == orders, (name, released)
    return results


def sweep_table(results: dict) -> list[str]:
    base = results["floor"][0]
    rows = ["| sweep | seconds | orders/s | x floor time | queries per order |", "|---|---|---|---|---|"]
    for name, (seconds, released, queries) in results.items():
        per_order = "5 in all" if name == "floor" else (f"{queries / released:.1f}" if queries else "-")
        rows.append(f"| {name} | {seconds:.1f} | {released / seconds:.0f} | {seconds / base:.1f} | {per_order} |")
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=10_000)
    parser.add_argument("--skus", type=int, default=200)
    parser.add_argument("--batch", type=int, default=200)
    args = parser.parse_args()
    results = run_sweep(orders=args.orders, skus=args.skus, batch=args.batch)
    print(f"MariaDB, database {DATABASE}, {args.orders} overdue orders over {args.skus} SKUs, batch {args.batch}\n")
    print("\n".join(sweep_table(results)))


if __name__ == "__main__":
    main()
