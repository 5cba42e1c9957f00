"""The soak's report (docs/soak.md): what ran, what the books and the callers saw, what went wrong."""

import argparse
import os
import platform
import subprocess
from collections import Counter
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

from django.conf import settings
from django.core.cache import caches
from django.db import connection
from django.db.models import Count, Sum

from bench.soak.books import failed_payment_grace, per_sku
from bench.soak.record import FAULT_KINDS, Tally
from bench.soak.sweeps import SweepTotals
from bench.soak.traffic import DECLINE_RATE, OPERATIONS, STOCK_CAP, STOCK_START, WorkerResult
from inventory.models import Reservation, Stock, StockMovement
from orders.models import Order

Status = Order.Status
Kind = StockMovement.Kind


def _table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def _machine() -> list[list[str]]:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    memory = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal"))
    with connection.cursor() as cursor:
        cursor.execute("SELECT VERSION(), @@innodb_flush_log_at_trx_commit")
        mariadb, flush = cursor.fetchone()
    redis_version = caches[settings.LOCK_CACHE_ALIAS].client.get_client().info("server")["redis_version"]
    commit = subprocess.run(
        ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=Path(__file__).parent
    ).stdout.strip()
    packages = ", ".join(f"{name} {version(name)}" for name in ("Django", "django-redis", "redis", "mysqlclient"))
    return [
        ["CPU", f"{cpu}, {os.cpu_count()} cores (shared by every process, MariaDB and Redis)"],
        ["Memory", f"{memory / 1024 / 1024:.0f} GiB"],
        ["Kernel", platform.release()],
        ["Python", platform.python_version()],
        ["MariaDB", f"{mariadb}, innodb_flush_log_at_trx_commit={flush}"],
        ["Redis", redis_version],
        ["Packages", packages],
        ["Code", f"git {commit or '?'}" + (" (with uncommitted changes)" if commit.endswith("-dirty") else "")],
    ]


def _settings(args: argparse.Namespace) -> list[list[str]]:
    return [
        ["Traffic", f"{args.minutes:g} min, {args.workers} worker processes, mean think time {args.pause} s"],
        ["SKUs", f"{args.skus}: {args.hot} hot (half of all lines), {args.skus - args.hot} cold"],
        [
            "Opening stock",
            f"hot {STOCK_START['hot']}, cold {STOCK_START['cold']}; restocks stop at hot "
            f"{STOCK_CAP['hot']}, cold {STOCK_CAP['cold']}",
        ],
        ["Reservation TTL", f"{settings.RESERVATION_TTL_SECONDS} s"],
        [
            "Sweeps",
            f"{args.sweepers} sweeper processes, each every {args.sweep_every} s "
            f"(batch {settings.SWEEP_BATCH_SIZE}, lease {settings.SWEEP_LEASE_SECONDS} s, "
            f"lock wait {settings.SWEEP_LOCK_WAIT_SECONDS} s)",
        ],
        [
            "Book checks",
            f"every {args.check_every} s; a payment-failed order may hold stock {failed_payment_grace(args):g} s "
            "(lease + 3 sweep intervals) before it counts as stuck",
        ],
        [
            "Locks",
            f"TTL {settings.LOCK_TTL_SECONDS} s, wait {settings.LOCK_WAIT_SECONDS} s, batch {settings.STOCK_BATCH_MAX}",
        ],
        [
            "Mix",
            ", ".join(f"{kind} {weight}" for kind, weight in OPERATIONS.items())
            + f"; {DECLINE_RATE:.0%} of payments declined; 2.5% of lines ask for "
            f"{settings.MAX_LINE_QUANTITY} units, 0.5% for {settings.MAX_LINE_QUANTITY + 1}",
        ],
    ]


def _ledger_totals() -> list[list]:
    movements = StockMovement.objects.values("kind").annotate(
        on_hand=Sum("on_hand_delta"), reserved=Sum("reserved_delta")
    )
    by_kind = {row["kind"]: row for row in movements}
    positive = StockMovement.objects.filter(kind=Kind.ADJUST, on_hand_delta__gt=0).aggregate(n=Sum("on_hand_delta"))[
        "n"
    ]
    negative = StockMovement.objects.filter(kind=Kind.ADJUST, on_hand_delta__lt=0).aggregate(n=Sum("on_hand_delta"))[
        "n"
    ]
    released = (
        StockMovement.objects.filter(kind=Kind.RELEASE)
        .values("reason")
        .annotate(units=Sum("reserved_delta"))
        .order_by("reason")
    )
    stock = Stock.objects.aggregate(on_hand=Sum("on_hand"), reserved=Sum("reserved"))
    reservations = Reservation.objects.values("state").annotate(n=Count("pk")).order_by("state")
    orders = Order.all_objects.values("status").annotate(n=Count("pk")).order_by("status")
    rows = [
        ["units received (restocks, opening stock included)", by_kind.get(Kind.RESTOCK, {}).get("on_hand", 0)],
        ["units added by staff adjustments", positive or 0],
        ["units removed by staff adjustments", -(negative or 0)],
        ["units reserved", by_kind.get(Kind.RESERVE, {}).get("reserved", 0)],
        ["units committed (sold)", -(by_kind.get(Kind.COMMIT, {}).get("on_hand") or 0)],
        *[[f"units released: {row['reason']}", -row["units"]] for row in released],
        ["on hand at the end", stock["on_hand"]],
        ["reserved at the end", stock["reserved"]],
        *[[f"reservations {row['state']}", row["n"]] for row in reservations],
        *[[f"orders {row['status']}", row["n"]] for row in orders],
    ]
    return rows


def _merge(tallies: list[Tally]) -> Tally:
    merged = Tally("all")
    for tally in tallies:
        merged.ops.update(tally.ops)
        merged.refusals.update(tally.refusals)
        merged.unexpected.update(tally.unexpected)
        merged.logged.update(tally.logged)
        merged.logged_in_fault.update(tally.logged_in_fault)
        for name, sample in tally.samples.items():
            merged.samples.setdefault(name, sample)
        for kind, seconds in tally.slowest.items():
            merged.slowest[kind] = max(merged.slowest[kind], seconds)
    return merged


def _clients_against_database(workers: list[WorkerResult]) -> tuple[list[list], list[str]]:
    """Orders and payments the callers were told of, against what the database holds, and the units
    callers were told are theirs (paid) against the units put in by the ledger's rows."""
    placed = set().union(*(w.placed for w in workers))
    paid = set().union(*(w.paid for w in workers))
    unsure = set().union(*(w.unsure_keys for w in workers))
    unsure_paid = set().union(*(w.unsure_paid for w in workers))
    told_units = Counter()
    for worker in workers:
        for pk in worker.paid:
            for item in worker.items[pk]:
                told_units[item["sku"]] += item["quantity"]
    put_in = per_sku(
        StockMovement.objects.filter(kind__in=[Kind.RESTOCK, Kind.ADJUST]), "stock__variant__sku", "on_hand_delta"
    )
    oversold = sum(max(0, told_units[sku] - put_in[sku]) for sku in told_units)
    in_db = set(Order.all_objects.values_list("pk", flat=True))
    paid_in_db = set(Order.all_objects.filter(status=Status.PAID).values_list("pk", flat=True))
    unseen = in_db - placed
    explained = set(Order.all_objects.filter(pk__in=unseen, idempotency_key__in=unsure).values_list("pk", flat=True))
    problems = []
    if placed - in_db:
        problems.append(f"{len(placed - in_db)} order(s) a caller was given are not in the database")
    if unseen - explained:
        problems.append(
            f"{len(unseen - explained)} order(s) in the database no caller was given: {sorted(unseen - explained)[:10]}"
        )
    if oversold:
        problems.append(f"callers were told they bought {oversold} unit(s) more than were put in")
    if paid - paid_in_db or paid_in_db - paid - unsure_paid:
        problems.append(
            f"paid orders: callers were told {len(paid)}, the database has {len(paid_in_db)} "
            f"(told but not paid: {sorted(paid - paid_in_db)[:10]}, "
            f"paid but not told: {sorted(paid_in_db - paid)[:10]})"
        )
    rows = [
        ["orders callers were given", len(placed)],
        ["orders in the database", len(in_db)],
        ["of those, placed though the caller got lock_timeout or an exception", len(explained)],
        ["paid orders callers were told of", len(paid)],
        ["paid orders in the database", len(paid_in_db)],
        ["of those, paid though the caller got an exception or was killed paying", len(paid_in_db & unsure_paid)],
        ["units callers were told are theirs (paid orders)", sum(told_units.values())],
        ["units put in (restock and adjustment rows)", sum(put_in.values())],
        ["oversold: units told paid beyond units put in, summed over SKUs", oversold],
    ]
    return rows, problems


def report(
    args: argparse.Namespace, results, final_tally, final_sweeps, final, problems_so_far
) -> tuple[Path, list[str]]:
    workers = results["worker"]
    sweepers = results["sweeper"]
    checker_tally, checks = results["checker"][0] if results["checker"] else (Tally("checker"), [])
    tally = _merge([w.tally for w in workers] + [t for t, _ in sweepers] + [checker_tally, final_tally])
    sweeps = SweepTotals()
    for totals in [s for _, s in sweepers] + [final_sweeps]:
        sweeps.passes += totals.passes
        sweeps.done.update(totals.done)
        sweeps.units.update(totals.units)
        sweeps.skipped.update(totals.skipped)
    cross_rows, problems = _clients_against_database(workers)
    problems = problems_so_far + problems
    if tally.unexpected:
        problems.append(f"unexpected exceptions: {dict(tally.unexpected)}")
    errors_logged = sum(n for (level, *_), n in tally.logged.items() if level in ("ERROR", "CRITICAL"))
    if errors_logged:
        problems.append(f"{errors_logged} error(s) logged by the shop outside any fault")
    faults = results["faults"]
    if not_injected := [f.kind for f in faults if not f.injected]:
        problems.append(f"faults not injected: {not_injected}")
    dirty = [c for c in checks if not c.clean]
    if dirty:
        problems.append(f"{len(dirty)} of {len(checks)} book checks found a problem")
    if not final.clean or final.reserved or final.open_orders or final.pending or final.overdue:
        problems.append("the final check is not clean (see the table)")
    if not checks:
        problems.append("no book check ran")

    seconds = results["seconds"]
    by_kind = Counter()
    for (kind, _), count in tally.ops.items():
        by_kind[kind] += count
    op_rows = [
        [kind, outcome, f"{count:,}", f"{tally.slowest[kind]:.2f}"]
        for (kind, outcome), count in sorted(tally.ops.items(), key=lambda item: (item[0][0], -item[1]))
    ]
    minute_rows = []
    for minute in range(int(seconds // 60) + 1):
        in_minute = [c for c in checks if minute * 60 <= c.at < (minute + 1) * 60]
        if in_minute:
            minute_rows.append(
                [
                    f"{minute}-{minute + 1}",
                    len(in_minute),
                    sum(len(c.drifted) for c in in_minute),
                    sum(len(c.negative) for c in in_minute),
                    max(c.oversold for c in in_minute),
                    sum(len(c.mismatched) for c in in_minute),
                    sum(len(c.stuck) for c in in_minute),
                    max(c.pending for c in in_minute),
                    f"{max(c.oldest_pending for c in in_minute):.1f}",
                    max(c.open_orders for c in in_minute),
                    f"{max(c.sweep_lag for c in in_minute):.1f}",
                    max(c.reserved for c in in_minute),
                    f"{max(c.seconds for c in in_minute):.2f}",
                ]
            )
    traffic_ops = sum(n for (kind, _), n in tally.ops.items() if kind in OPERATIONS)
    lines = [
        "# Soak",
        "",
        f"Generated by `python -m bench.soak --minutes {args.minutes:g} --workers {args.workers} --skus {args.skus} "
        f"--fault-rounds {args.fault_rounds}` on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC. "
        f"**{'PASS' if not problems else 'FAIL'}**: "
        + (
            f"{sum(f.injected for f in faults)} faults injected; zero drift, zero oversell (from the rows and from "
            "the answers), no unexpected exception."
            if not problems
            else "; ".join(problems)
        ),
        "",
        "Worker processes drive the real services with a random mix; sweeper processes run the sweeps",
        "Celery beat runs; a checker process reads the books in one snapshot every few seconds. Meanwhile",
        "faults are injected (below). At the end the workers stop, the last reservations expire and are",
        "swept, and a final check allows no grace. (`bench/soak/` says how; `bin/soak` runs it.)",
        "",
        "## Faults",
        "",
        f"Spread evenly over the traffic, each kind {args.fault_rounds} times. Warnings and errors the shop logs "
        f"from a fault's start until {settings.LOCK_TTL_SECONDS + settings.LOCK_WAIT_SOCKET_TIMEOUT_SECONDS:g} s after "
        "its end (a lock's TTL plus a waiter's socket timeout) are listed apart, as the fault's; any other fails the "
        f"run. {results['killed processes']} processes were killed: their operations are counted from their "
        "journals (without timings), and the operation each had in flight counts as one whose outcome its caller "
        "could not know.",
        "",
        *_table(
            ["fault", "what", "injected"],
            [[kind, what, sum(f.injected for f in faults if f.kind == kind)] for kind, what in FAULT_KINDS.items()],
        ),
        "",
        *_table(
            ["at, s", "fault", "lasted, s", "detail"],
            [[f"{f.at:.0f}", f.kind, f"{f.seconds:.1f}", f.detail] for f in faults],
        ),
        "",
        "## Machine and settings",
        "",
        *_table(["", ""], _machine() + _settings(args)),
        "",
        "## Book checks",
        "",
        f"{len(checks)} checks in {seconds / 60:.1f} minutes, then the final one. Each reads, in one REPEATABLE READ "
        "snapshot: `stock_books()` (counters against the ledger and the active reservations), negative or "
        "over-reserved counters, units held or sold per SKU (active and committed reservation rows) against "
        "units put in (restock and adjustment ledger rows: *oversold*, which the counters' CHECK does not bound), "
        "on hand against put in minus paid and committed reservations against paid lines (*mismatched*), and "
        "final orders still holding stock (*stuck*; a payment-failed one only after the grace).",
        "",
        *_table(
            [
                "minute",
                "checks",
                "drifted rows",
                "negative rows",
                "oversold units",
                "mismatched rows",
                "stuck orders",
                "failed payments awaiting release (max)",
                "oldest of them, s",
                "open orders (max)",
                "sweep lag, s (max)",
                "reserved units (max)",
                "check took, s (max)",
            ],
            minute_rows,
        ),
        "",
        "Final check: "
        + f"drifted {len(final.drifted)}, negative {len(final.negative)}, oversold {final.oversold}, mismatched "
        f"{len(final.mismatched)}, final orders holding stock {len(final.stuck) + final.pending}, open orders "
        f"{final.open_orders}, reserved {final.reserved}.",
        "",
        "<details><summary>Every check</summary>",
        "",
        *_table(
            [
                "at, s",
                "drifted",
                "negative",
                "oversold",
                "mismatched",
                "stuck",
                "pending",
                "open",
                "overdue",
                "lag, s",
                "reserved",
                "took, s",
            ],
            [
                [
                    "final" if c is final else f"{c.at:.0f}",
                    len(c.drifted),
                    len(c.negative),
                    c.oversold,
                    len(c.mismatched),
                    len(c.stuck),
                    c.pending,
                    c.open_orders,
                    c.overdue,
                    f"{c.sweep_lag:.1f}",
                    c.reserved,
                    f"{c.seconds:.2f}",
                ]
                for c in checks + [final]
            ],
        ),
        "",
        "</details>",
        "",
        "## Operations",
        "",
        f"{traffic_ops:,} traffic operations in {seconds:.0f} s ({traffic_ops / seconds:.0f}/s). Outcomes other than "
        "the expected success are refusals by their error code. *slowest* is the longest single call of that kind.",
        "",
        *_table(["operation", "outcome", "count", "slowest, s"], op_rows),
        "",
        "## Refusals by code",
        "",
        *_table(["code", "count"], [[code, f"{n:,}"] for code, n in tally.refusals.most_common()]),
        "",
        "## Unexpected exceptions",
        "",
    ]
    if tally.unexpected:
        lines += _table(["exception", "count"], [[name, n] for name, n in tally.unexpected.most_common()])
        for name, sample in tally.samples.items():
            lines += ["", f"First `{name}`:", "", "```", sample.strip(), "```"]
    else:
        lines.append("None.")
    for title, logged in (
        ("Warnings and errors the shop logged outside the faults", tally.logged),
        ("Warnings and errors the shop logged during a fault or its aftermath", tally.logged_in_fault),
    ):
        lines += ["", f"## {title}", ""]
        if logged:
            lines += _table(
                ["level", "logger", "message", "count"],
                [[level, name, f"`{message}`", n] for (level, name, message), n in logged.most_common()],
            )
        else:
            lines.append("None.")
    lines += [
        "",
        "## Sweeps",
        "",
        f"{sweeps.passes} passes (the final ones included); the payment sweep settled "
        f"{sweeps.done['charges settled']} charge(s) left unsettled over {settings.PAYMENT_SETTLE_AFTER_SECONDS:g} s "
        "(their payer was killed).",
        "",
        *_table(
            ["sweep", "orders released", "units", "orders skipped (SKU busy)"],
            [[name, sweeps.done[name], sweeps.units[name], sweeps.skipped[name]] for name in ("expired", "failed")],
        ),
        "",
        "## Units and orders",
        "",
        *_table(["", ""], _ledger_totals()),
        "",
        "## What the callers were told, against the database",
        "",
        "Read from the workers' journals (a killed worker's included). *Oversold* here counts from the answers: "
        "the units of every order a caller was told is paid, per SKU, beyond the units put in.",
        "",
        *_table(["", ""], cross_rows),
        "",
    ]
    args.report.parent.mkdir(parents=True, exist_ok=True)
    args.report.write_text("\n".join(lines))
    return args.report, problems
