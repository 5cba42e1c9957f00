"""How the shop's costs grow with history: the books, the expiry sweep and the order lists, measured on a
database holding only what the measurements need beside one that also holds ``--orders`` (10 million)
orders of history, each written by ``manage.py seed_history``.

    DATABASE_URL=mysql://root:@127.0.0.1:3306/shop REDIS_URL=redis://127.0.0.1:6379/0 bin/history-bench

Two databases, ``<name>_hist_fresh`` and ``<name>_hist_big``, are kept between runs (the big one takes a
while to write; ``--rebuild`` writes them again). Each holds ``--overdue-total`` orders awaiting payment
past their expiry; the big one holds the history besides. In each, side by side:

- the books: the reconcile task's first checkpoint (it sums the whole ledger once), ``reconcile`` from
  the checkpoints, ``reconcile --full``, and ``reconcile`` as it was before checkpoints (``--before``, a
  commit run from a git worktree on the same database);
- the expiry sweep of ``--overdue`` orders, batched with 1 and 4 sweepers, and the sweep of the code
  before batches (``--before``, each order in a section of its own) on ``--baseline`` of them: a slice
  of the orders awaiting payment is made due before each run;
- the lists: the admin's order list, the API's order list and the "my orders" page of the customer with
  the most orders (median of 5 requests through Django's test client, in-process).

The report goes to docs/history.md.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
REPORT = ROOT / "docs" / "history.md"
BUYERS = 2  # processes placing one-unit orders during the batched sweeps (``bench.sweepers.Buyers``)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--orders", type=int, default=10_000_000, help="orders of history in the big database")
    parser.add_argument("--skus", type=int, default=200)
    parser.add_argument("--overdue", type=int, default=100_000, help="overdue orders each batched sweep releases")
    parser.add_argument("--baseline", type=int, default=10_000, help="overdue orders each one-by-one sweep releases")
    parser.add_argument("--before", default="aa30817^", help="the commit whose reconcile had no checkpoints")
    parser.add_argument("--rebuild", action="store_true", help="write both databases again")
    parser.add_argument("--only", choices=["fresh", "big"], help="measure one database")
    parser.add_argument("--seed-only", action="store_true", help="write the databases, measure nothing")
    parser.add_argument("--before-timeout", type=float, default=1200, help="stop the old reconcile after this")
    parser.add_argument("--report-only", action="store_true", help="write docs/history.md from the last figures")
    parser.add_argument("--resume", action="store_true", help="measure only what the last run did not")
    args = parser.parse_args()
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("mysql"):
        raise SystemExit("Set DATABASE_URL=mysql://... (and REDIS_URL): the history is written to MariaDB.")
    overdue_total = 2 * args.overdue + 2 * args.baseline
    databases = {
        "fresh": (f"{url.rsplit('/', 1)[1]}_hist_fresh", overdue_total),
        "big": (f"{url.rsplit('/', 1)[1]}_hist_big", args.orders + overdue_total),
    }
    results = json.loads(REPORT.with_suffix(".json").read_text()) if REPORT.with_suffix(".json").exists() else {}
    if args.report_only:
        REPORT.write_text(_report(results, args))
        return
    before = _worktree(args.before)
    for label, (name, orders) in databases.items():
        if args.only and label != args.only:
            continue
        env = {"SECRET_KEY": "bench-only-not-a-secret"} | os.environ
        env |= {"DATABASE_URL": url.rsplit("/", 1)[0] + "/" + name, "LOCK_KEY_PREFIX": f"hist-{label}"}
        seeded = _database(env, name, orders=orders, overdue=overdue_total, skus=args.skus, rebuild=args.rebuild)
        if args.seed_only:
            results[label] = {"orders": orders, "seeded": seeded or results.get(label, {}).get("seeded")}
            REPORT.with_suffix(".json").write_text(json.dumps(results, indent=1))
            continue
        measure_args = ["measure", "--overdue", str(args.overdue), "--baseline", str(args.baseline)]
        measured = _child(env, [*measure_args, *(["--resume"] if args.resume else [])], label)
        measured["before checkpoints"] = _reconcile_before(before, env, name, timeout=args.before_timeout)
        for workers in (1, 4):
            measured[f"sweep before batches x{workers}"] = _sweep_before(before, env, name, workers, args.baseline)
        results[label] = {"orders": orders, "seeded": seeded or results.get(label, {}).get("seeded"), **measured}
        REPORT.with_suffix(".json").write_text(json.dumps(results, indent=1))
    REPORT.write_text(_report(results, args))
    print(REPORT.read_text())


def _worktree(ref: str) -> Path:
    """The code of ``ref``, checked out beside this one (once)."""
    path = (
        Path("/tmp")
        / f"shop-before-{subprocess.check_output(['git', 'rev-parse', '--short', ref], cwd=ROOT, text=True).strip()}"
    )
    if not path.exists():
        subprocess.run(["git", "worktree", "add", "--detach", str(path), ref], cwd=ROOT, check=True)
    return path


def _database(env: dict, name: str, *, orders: int, overdue: int, skus: int, rebuild: bool) -> dict | None:
    """Create, migrate and seed the database unless it holds its orders already; the seeding's figures."""
    manage = [sys.executable, str(ROOT / "manage.py")]
    mysql = ["mysql", "-uroot", "-h127.0.0.1"]
    if rebuild:
        subprocess.run([*mysql, "-e", f"DROP DATABASE IF EXISTS `{name}`"], check=True)
    subprocess.run([*mysql, "-e", f"CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4"], check=True)
    subprocess.run([*manage, "migrate", "-v0"], env=env, check=True)
    held = subprocess.run(
        [*mysql, name, "-N", "-e", "SELECT COUNT(*) FROM orders_order"], capture_output=True, text=True, check=True
    )
    if int(held.stdout.strip()) >= orders:
        return None
    started = time.perf_counter()
    subprocess.run(
        [*manage, "seed_history", "--orders", str(orders), "--skus", str(skus), "--overdue", str(overdue)],
        env=env,
        check=True,
    )
    return {"seconds": time.perf_counter() - started}


def _child(env: dict, args: list[str], label: str) -> dict:
    """The measurements of one database, in a process of its own; a failure is printed, what was measured
    before it is kept."""
    out = Path("/tmp") / f"history-{label}.json"
    if "--resume" not in args:
        out.unlink(missing_ok=True)
    done = subprocess.run([sys.executable, "-m", "bench.history", *args, "--out", str(out)], env=env, cwd=ROOT)
    if done.returncode:
        print(f"measuring {label} failed (exit {done.returncode}); what was measured before is kept")
    return json.loads(out.read_text()) if out.exists() else {}


def _reconcile_before(worktree: Path, env: dict, name: str, *, timeout: float) -> float | str:
    """Seconds the reconcile command of the code before checkpoints takes on this database, or, past
    ``timeout``, that it was stopped (its queries killed on the server too)."""
    script = (
        "import django, io, time; django.setup(); from django.core.management import call_command; "
        "started = time.perf_counter(); call_command('reconcile', stdout=io.StringIO()); "
        "print(time.perf_counter() - started)"
    )
    env = env | {"DJANGO_SETTINGS_MODULE": "config.settings"}
    try:
        out = subprocess.run(
            [sys.executable, "-c", script], env=env, cwd=worktree, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        kill = (
            "SELECT CONCAT('KILL ', id, ';') FROM information_schema.processlist"
            f" WHERE db = '{name}' AND command = 'Query' AND id <> CONNECTION_ID()"
        )
        statements = subprocess.run(
            ["mysql", "-uroot", "-h127.0.0.1", "-N", "-e", kill], capture_output=True, text=True
        )
        if statements.stdout.strip():
            subprocess.run(["mysql", "-uroot", "-h127.0.0.1", "-e", statements.stdout], check=False)
        return f"> {timeout:.0f} (stopped)"
    if out.returncode:
        return "failed: " + out.stderr.strip().splitlines()[-1][:200]
    return float(out.stdout.strip().splitlines()[-1])


SWEEP_BEFORE = """
import django, multiprocessing, sys, time
django.setup()
from django.conf import settings
from django.db import connections
from orders.services import order_release_expired

def sweep(_):
    connections.close_all()
    return order_release_expired(batch_size=settings.SWEEP_BATCH_SIZE).done

workers = int(sys.argv[1])
connections.close_all()
started = time.perf_counter()
with multiprocessing.get_context("fork").Pool(workers) as pool:
    released = sum(pool.map(sweep, range(workers)))
print(released, time.perf_counter() - started)
"""


def _sweep_before(worktree: Path, env: dict, name: str, workers: int, count: int) -> dict:
    """The sweep of the code before batches (each order in a section of its own) over ``count`` of the
    orders still awaiting payment, made due."""
    mysql = ["mysql", "-uroot", "-h127.0.0.1", name, "-N", "-e"]
    ids = subprocess.run(
        [*mysql, "SELECT id FROM orders_order WHERE status = 'awaiting_payment' ORDER BY id"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()[:count]
    subprocess.run(
        [
            *mysql,
            "UPDATE orders_order SET expires_at = NOW(6) + INTERVAL 1 DAY WHERE status = 'awaiting_payment';"
            "UPDATE orders_order SET expires_at = NOW(6) - INTERVAL 1 MINUTE, sweep_lease_until = NULL"
            f" WHERE id IN ({', '.join(ids)})",
        ],
        check=True,
    )
    env = env | {"DJANGO_SETTINGS_MODULE": "config.settings"}
    out = subprocess.run(
        [sys.executable, "-c", SWEEP_BEFORE, str(workers)], env=env, cwd=worktree, capture_output=True, text=True
    )
    if out.returncode:
        return {"failed": out.stderr.strip().splitlines()[-1][:200]}
    released, seconds = out.stdout.split()
    return {"seconds": float(seconds), "released": int(released), "rate": int(released) / float(seconds)}


def _report(results: dict, args) -> str:
    fresh, big = results.get("fresh", {}), results.get("big", {})

    def cell(data: dict, *path, fmt="{:.2f}"):
        for key in path:
            if isinstance(data, dict) and "failed" in data:
                return f"failed: {data['failed']}"
            data = data.get(key, {}) if isinstance(data, dict) else {}
        if isinstance(data, str):
            return data
        return fmt.format(data) if isinstance(data, (int, float)) else "-"

    def row(name, *path, fmt="{:.2f}"):
        return f"| {name} | {cell(fresh, *path, fmt=fmt)} | {cell(big, *path, fmt=fmt)} |"

    orders = f"{big.get('orders', args.orders):,}"
    lines = [
        "# Costs as history grows",
        "",
        "Generated by `bin/history-bench` (`bench/history.py`): every figure measured on this machine (2 cores,",
        "MariaDB's default 128 MiB buffer pool), on a database holding only the overdue orders the sweeps",
        f"release (*fresh*) beside one that also holds the history of {orders} orders written by",
        "`manage.py seed_history` (*history*). Seconds unless said.",
        "",
        f"| measure | fresh ({fresh.get('orders', 0):,} orders) | history ({orders} orders) |",
        "|---|---|---|",
        row("write the database (`seed_history`)", "seeded", "seconds", fmt="{:.0f}"),
        row("ledger rows (the newest id)", "ledger_rows", fmt="{:,}"),
        row("the first ledger checkpoints (the whole ledger, once)", "checkpoint_first"),
        row("moving the checkpoints forward again (the task, each run)", "checkpoint_again"),
        row("`reconcile`, from the checkpoints", "reconcile"),
        row("`reconcile --full`", "reconcile_full"),
        row("`reconcile` before checkpoints", "before checkpoints"),
    ]
    for name, key in [
        (f"sweep of {args.overdue:,} overdue orders, batched, 1 sweeper", "sweep batched x1"),
        (f"sweep of {args.overdue:,} overdue orders, batched, 4 sweepers", "sweep batched x4"),
        (f"sweep of {args.baseline:,} overdue orders before batches, 1 sweeper", "sweep before batches x1"),
        (f"sweep of {args.baseline:,} overdue orders before batches, 4 sweepers", "sweep before batches x4"),
    ]:
        lines.append(row(f"{name}: seconds", key, "seconds"))
        lines.append(row(f"{name}: orders released a second", key, "rate", fmt="{:,.0f}"))
    for data in (fresh, big):
        for workers in (1, 4):
            batched, before = data.get(f"sweep batched x{workers}", {}), data.get("sweep before batches x1", {})
            if "rate" in batched and "rate" in before:
                data[f"x{workers} over before"] = batched["rate"] / before["rate"]
    lines += [
        row("batched, 1 sweeper: times the rate of 1 sweeper before batches", "x1 over before", fmt="{:.1f}"),
        row("batched, 4 sweepers: times the rate of 1 sweeper before batches", "x4 over before", fmt="{:.1f}"),
    ]
    for name, key, p99_key in [
        ("no sweep running (10 s)", "buyers alone", "p99_ms"),
        ("during the batched sweep, 1 sweeper", "sweep batched x1", "buyers_p99_ms"),
        ("during the batched sweep, 4 sweepers", "sweep batched x4", "buyers_p99_ms"),
    ]:
        lines.append(row(f"{BUYERS} buyers' p99 (ms), {name}", key, p99_key, fmt="{:.0f}"))
        lines.append(row(f"orders they placed, {name}", key, "placed", fmt="{:,}"))
    lines += [
        row("admin order list (ms, median of 5)", "admin_list_ms", fmt="{:.0f}"),
        row("API order list of the busiest customer (ms)", "api_list_ms", fmt="{:.0f}"),
        row('that customer\'s "my orders" page (ms)', "my_orders_ms", fmt="{:.0f}"),
        row("that customer's orders", "customer_orders", fmt="{:,}"),
        "",
        f"The buyers: {BUYERS} processes placing one-unit orders on random SKUs of the history (each restocked",
        "first, through the stock service) for 10 s with no sweep running, then during each batched sweep: how",
        "long a buyer of a swept SKU waits for a sweep's section. The multiples divide a batched rate by that",
        "of 1 sweeper before batches on the same database.",
        "",
        "A cell that says *failed* is the error the run raised; MariaDB's error log says why the server went",
        "away. The code before checkpoints and batches is run from a git worktree of `--before` on the same",
        "database.",
        "",
    ]
    return "\n".join(lines) + "\n"


# --- in the child: Django set up on one database --------------------------------------------------------


def measure(overdue: int, baseline: int, out: Path, *, resume: bool = False) -> dict:
    import django

    django.setup()
    from django.core.management import call_command

    from inventory.models import LedgerCheckpoint
    from inventory.services import ledger_checkpoint_list_take

    results = json.loads(out.read_text()) if resume and out.exists() else {}
    if "my_orders_ms" not in results:
        _lists(results, out)
    if "checkpoint_again" not in results:
        LedgerCheckpoint.objects.all().delete()
        results["checkpoint_first"] = _timed(ledger_checkpoint_list_take)
        results["checkpoint_again"] = _timed(ledger_checkpoint_list_take)
        _save(out, results)
    if "sweep batched x4" not in results:
        _sweeps(results, out, overdue)
    if "reconcile_full" not in results:
        # After the sweeps, so the books are checked balanced after them too; a clean run marks where the
        # next default run reads from.
        results["reconcile_full"] = _timed(lambda: _quiet(call_command, "reconcile", "--full"))
        _save(out, results)
    results["reconcile"] = _timed(lambda: _quiet(call_command, "reconcile"))
    _save(out, results)
    return results


def _lists(results: dict, out: Path) -> None:
    from django.contrib.auth import get_user_model
    from django.db.models import Count

    from inventory.models import StockMovement
    from orders.models import Order

    results["ledger_rows"] = StockMovement.objects.order_by("-pk").values_list("pk", flat=True).first() or 0
    busiest = Order.objects.exclude(customer=None).values("customer").annotate(n=Count("pk")).order_by("-n").first()
    customer = get_user_model().objects.get(pk=busiest["customer"])
    results["customer_orders"] = busiest["n"]
    staff, _ = get_user_model().objects.get_or_create(
        username="history-staff", defaults={"is_staff": True, "is_superuser": True}
    )
    results["admin_list_ms"] = _median_ms(staff, "/admin/orders/order/")
    results["api_list_ms"] = _median_ms(customer, "/api/orders/")
    results["my_orders_ms"] = _median_ms(customer, "/orders/")
    _save(out, results)


def _sweeps(results: dict, out: Path, overdue: int) -> None:
    """The batched sweeps, with buyers placing orders on the history's SKUs meanwhile (and alone before,
    for their p99 without a sweep): each SKU gets units enough first, through the stock service."""
    from django.conf import settings
    from django.db import connection

    from bench.sweepers import Buyers, p99, sweepers_run
    from demo.history.catalog import SKU_PREFIX
    from inventory.services import stock_restock
    from orders.models import Order
    from shipping.models import ShippingMethod
    from shop.models import ProductVariant

    skus = list(ProductVariant.objects.filter(sku__startswith=SKU_PREFIX).values_list("sku", flat=True))
    for sku in skus:
        stock_restock(sku=sku, quantity=10_000, reason="history bench buyers")
    # The history's goods are shipped: the buyers send an address in the shop's country and its method.
    country = settings.SHOP_COUNTRY
    method = ShippingMethod.objects.filter(zone__countries__contains=country).values_list("pk", flat=True).first()
    address = {"full_name": "History Buyer", "line1": "Street 1", "city": "City", "postal_code": "10115"}
    shipping = {"shipping_address": address | {"country": country}, "shipping_method": method}
    awaiting = list(Order.objects.filter(status="awaiting_payment").order_by("pk").values_list("pk", flat=True))
    _make_due(connection, [])
    with Buyers(BUYERS, skus, **shipping) as alone:
        time.sleep(10)
    results["buyers alone"] = {"p99_ms": p99(alone.latencies), "placed": len(alone.latencies)}
    slices = {
        "sweep batched x1": (awaiting[:overdue], 1),
        "sweep batched x4": (awaiting[overdue : 2 * overdue], 4),
    }
    for name, (ids, workers) in slices.items():
        _make_due(connection, ids)
        with Buyers(BUYERS, skus, **shipping) as during:
            started = time.perf_counter()
            released, _ = sweepers_run(workers, batch=settings.SWEEP_BATCH_SIZE)
            seconds = time.perf_counter() - started
        results[name] = {
            "seconds": seconds,
            "released": released,
            "rate": released / seconds,
            "buyers_p99_ms": p99(during.latencies),
            "placed": len(during.latencies),
        }
        _save(out, results)


def _make_due(connection, ids: list[int]) -> None:
    """Only these orders awaiting payment are overdue: the others' expiry moves a day ahead."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE orders_order SET expires_at = NOW(6) + INTERVAL 1 DAY WHERE status = 'awaiting_payment'")
        for start in range(0, len(ids), 5000):
            part = ids[start : start + 5000]
            cursor.execute(
                f"UPDATE orders_order SET expires_at = NOW(6) - INTERVAL 1 MINUTE, sweep_lease_until = NULL"
                f" WHERE id IN ({', '.join(['%s'] * len(part))})",
                part,
            )


def _median_ms(user, path: str) -> float:
    from django.test import Client

    client = Client()
    client.force_login(user)
    times = []
    for _ in range(5):
        started = time.perf_counter()
        response = client.get(path)
        times.append((time.perf_counter() - started) * 1000)
        assert response.status_code == 200, (path, response.status_code)
    return statistics.median(times)


def _save(out: Path, results: dict) -> None:
    """What is measured so far, for the parent to read even if a later step fails."""
    out.write_text(json.dumps(results))


def _timed(func) -> float:
    started = time.perf_counter()
    func()
    return time.perf_counter() - started


def _quiet(func, *args):
    import io

    from django.core.management import CommandError

    try:
        func(*args, stdout=io.StringIO(), stderr=io.StringIO())
    except CommandError as drift:  # timed all the same; the report's books must balance
        raise SystemExit(f"{args}: the books do not balance on the seeded database") from drift


if __name__ == "__main__":
    if sys.argv[1:2] == ["measure"]:
        child = argparse.ArgumentParser()
        child.add_argument("measure")
        child.add_argument("--overdue", type=int)
        child.add_argument("--baseline", type=int)
        child.add_argument("--out", type=Path)
        child.add_argument("--resume", action="store_true")
        parsed = child.parse_args()
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
        os.environ.setdefault("SECRET_KEY", "bench-only-not-a-secret")
        measure(parsed.overdue, parsed.baseline, parsed.out, resume=parsed.resume)
    else:
        main()
