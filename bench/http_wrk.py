"""HTTP with a C load generator: our ``POST /api/orders/`` beside a DRF floor, a bare floor and a plain checkout.

One gunicorn, set up as ``bench.http_load`` sets it up (2 x cores workers of ``THREADS`` threads), on
``bench.http_settings``: the shop's settings and middleware, with the baseline views of ``bench.http_views``
routed beside its API. wrk (Debian's ``wrk``) drives each cell at 64 connections through
``bench/http_wrk.lua``: the token, a JSON cart and a fresh Idempotency-Key per request. The designs run
side by side on fresh SKUs: one hot SKU with ample stock, 3-SKU carts over 10 SKUs, and a hot SKU sold
out from a small stock, where the units sold never exceed the stock (counted from the 2xx answers and
from the rows, against the restock rows) and the books agree. All of it once per ``CONN_MAX_AGE``: 0
(development's default, a database connection per request) and 60 (production's).

    DATABASE_URL=mysql://root:@127.0.0.1:3306/shop REDIS_URL=redis://127.0.0.1:6379/0 python -m bench.http_wrk
"""

import argparse
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from bench._db import use_bench_database

DATABASE = use_bench_database()

import django  # noqa: E402

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from knox.models import AuthToken  # noqa: E402

from bench.http_load import THREADS, Server  # noqa: E402
from bench.reserve import machine_cpu, units_given_and_taken, wait_for_quiet_machine  # noqa: E402
from bench.shipping import ADDRESS, bench_shipping_method  # noqa: E402
from inventory.models import Stock  # noqa: E402
from inventory.variants import variant_create  # noqa: E402
from orders.models import Order  # noqa: E402

SCRIPT = Path(__file__).resolve().parent / "http_wrk.lua"
AMPLE = 10_000_000  # units of each SKU in the throughput cells: they never sell out there
SETTLE_SECONDS = 2.0  # after wrk stops, for the requests still in flight to finish before the next cell
TIMEOUT_SECONDS = 10  # wrk drops latencies above its timeout (counted as timeouts): keep it above any p99


@dataclass(frozen=True)
class HttpDesign:
    name: str
    path: str
    authenticated: bool  # sends the token (and is throttled as the order API is)
    line_field: str  # what each line of the JSON cart names: "sku", or "variant_id" for the floors
    rows: bool  # writes reservation rows (the books count them); else only the counter records a sale


OURS = HttpDesign("ours: POST /api/orders/", "/api/orders/", True, "sku", rows=True)
CHECKOUT = HttpDesign("plain Django checkout", "/bench/checkout/", True, "sku", rows=True)
DRF_FLOOR = HttpDesign("DRF floor: guarded UPDATE", "/bench/floor/drf/", True, "variant_id", rows=False)
BARE_FLOOR = HttpDesign("bare floor: guarded UPDATE", "/bench/floor/bare/", False, "variant_id", rows=False)
DESIGNS = [OURS, CHECKOUT, DRF_FLOOR, BARE_FLOOR]


@dataclass(frozen=True)
class Workload:
    name: str
    title: str
    skus: int
    lines: int  # SKUs per cart


HOT = Workload("hot", "one hot SKU", skus=1, lines=1)
THREE = Workload("three", "3-SKU carts over 10 SKUs", skus=10, lines=3)
WORKLOADS = [HOT, THREE]

# The HTTP targets, ours against a baseline at the same workload: (what, wanted, met).
TARGETS = [
    ("ours / plain checkout, requests/s", ">= 1.5x", lambda ratio: ratio >= 1.5),
    ("ours / DRF floor, requests/s", ">= 0.7x", lambda ratio: ratio >= 0.7),
    ("ours p99 / DRF floor p99", "<= 1.5x", lambda ratio: ratio <= 1.5),
]


def _shipped_to(method: int) -> str:
    """What the order API's carts carry after their items: the benches' address and shipping method."""
    return f', "shipping_address": {json.dumps(ADDRESS)}, "shipping_method": {method}'


def _buyer_token() -> tuple[object, str]:
    user, _ = get_user_model().objects.get_or_create(username="bench-wrk", defaults={"email": "wrk@example.com"})
    return user, AuthToken.objects.create(user)[1]


def _variants(count: int, stock: int) -> list:
    tag = uuid.uuid4().hex[:8].upper()
    log = logging.getLogger("inventory.services")
    level = log.level
    log.setLevel(logging.WARNING)  # not a line per restock
    try:
        return [
            variant_create(sku=f"W{tag}-{n:02d}", name="HTTP wrk bench", price="1.00", initial_stock=stock)
            for n in range(count)
        ]
    finally:
        log.setLevel(level)


def _wrk(
    url: str, *, variants, lines: int, line_field: str, token: str, seconds: int, connections: int, extra: str = ""
) -> dict:
    """One wrk run against ``url``; what ``bench/http_wrk.lua`` reports, in milliseconds and per second.
    ``extra``: JSON members each cart carries after its items (the address and shipping method)."""
    env = os.environ | {
        "WRK_EXTRA": extra,
        "WRK_RUN": uuid.uuid4().hex,
        "WRK_TOKEN": token,
        "WRK_ITEMS": ",".join(f"{variant.sku}={variant.pk}" for variant in variants),
        "WRK_LINES": str(lines),
        "WRK_FIELD": line_field,
    }
    threads = min(os.cpu_count() or 1, connections)
    command = [
        *("wrk", "--threads", str(threads), "--connections", str(connections), "--duration", f"{seconds}s"),
        *("--timeout", f"{TIMEOUT_SECONDS}s", "--latency", "--script", str(SCRIPT), url),
    ]
    busy_before = machine_cpu()
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    busy_after = machine_cpu()
    line = next((line for line in done.stdout.splitlines() if line.startswith("WRK_RESULT ")), None)
    if line is None:
        raise RuntimeError(f"wrk reported nothing:\n{done.stdout}\n{done.stderr}")
    result = json.loads(line.removeprefix("WRK_RESULT "))
    statuses = {int(code): count for code, count in result["statuses"].items()}
    ok = sum(count for code, count in statuses.items() if 200 <= code < 300)
    duration = result["duration_us"] / 1e6
    return {
        "connections": connections,
        "wrk_threads": threads,
        "seconds": duration,
        "requests": result["requests"],
        "requests_per_s": result["requests"] / duration,
        "ok": ok,
        "non_2xx": sum(statuses.values()) - ok,
        "statuses": dict(sorted(statuses.items())),
        "socket_errors": {kind: result[kind] for kind in ("connect", "read", "write", "timeout") if result[kind]},
        "p50_ms": result["p50_us"] / 1000,
        "p90_ms": result["p90_us"] / 1000,
        "p99_ms": result["p99_us"] / 1000,
        "max_ms": result["max_us"] / 1000,
        # Cores the whole machine kept busy meanwhile (wrk, gunicorn, MariaDB, Redis, the kernel, anything else).
        "cores_busy": (busy_after[0] - busy_before[0]) / (busy_after[1] - busy_before[1]),
    }


def _cell(server: Server, design: HttpDesign, workload: Workload, *, stock: int, token: str, **load):
    """One design on fresh SKUs of ``stock`` units each: its row, and the products."""
    variants = _variants(workload.skus, stock)
    result = _wrk(
        server.url + design.path,
        variants=variants,
        lines=workload.lines,
        line_field=design.line_field,
        token=token if design.authenticated else "",
        extra=_shipped_to(bench_shipping_method()) if design.line_field == "sku" else "",
        **load,
    )
    time.sleep(SETTLE_SECONDS)
    return result | {"design": design.name, "workload": workload.name, "stock": stock}, variants


def _books(design: HttpDesign, row: dict, variant) -> dict:
    """After a sell-out of one SKU: units sold beyond its stock, from the 2xx answers and from the rows,
    and whether the books agree (the counter, the reservation rows, the orders)."""
    [(given, taken)] = units_given_and_taken([variant])
    reserved = Stock.objects.get(variant=variant).reserved
    if design.rows:
        placed = Order.objects.filter(lines__variant=variant).count()
        # Requests in flight when wrk stopped are carried out but never answered: placed >= 2xx.
        agree = placed == taken == reserved and placed >= row["ok"]
    else:
        taken = reserved  # the floors write no rows: the counter is their only record
        agree = reserved >= row["ok"]
    return {
        "units_given": given,
        "units_taken": taken,
        "oversold_told": max(0, row["ok"] - given),
        "oversold_rows": max(0, taken - given),
        "books_agree": agree,
    }


def run_wrk(
    *,
    seconds: int = 10,
    connections: int = 64,
    sellout_seconds: int = 5,
    sellout_stock: int = 300,
    conn_max_ages=(0, 60),
    rounds: int = 1,
    threads: int = THREADS,
    progress=None,
) -> list[dict]:
    """Every design on every workload, side by side, per ``CONN_MAX_AGE``; then a sell-out per design.

    One row per cell: requests/s, p50/p90/p99 ms, answers by status, and for the sell-outs the books.
    Rounds run the designs in a rotated order each time.
    """
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install -y wrk")
    say = progress or (lambda message: None)
    call_command("migrate", verbosity=0)
    _, token = _buyer_token()
    rows = []
    for conn_max_age in conn_max_ages:
        env = {"DJANGO_SETTINGS_MODULE": "bench.http_settings", "CONN_MAX_AGE": str(conn_max_age)}
        with Server(workers=2 * os.cpu_count(), threads=threads, **env) as server:
            common = {"token": token, "connections": connections}
            say(f"CONN_MAX_AGE={conn_max_age}: warming up")
            for design in DESIGNS:
                _cell(server, design, HOT, stock=AMPLE, seconds=1, **common)  # every worker loads every view
            for round_ in range(rounds):
                order = DESIGNS[round_ % len(DESIGNS) :] + DESIGNS[: round_ % len(DESIGNS)]
                for workload in WORKLOADS:
                    for design in order:
                        say(f"CONN_MAX_AGE={conn_max_age} round {round_ + 1}: {workload.title}, {design.name}")
                        wait_for_quiet_machine()  # as the matrix's cells: nothing left over from the cell before
                        row, _ = _cell(server, design, workload, stock=AMPLE, seconds=seconds, **common)
                        rows.append(row | {"kind": "ample", "round": round_, "conn_max_age": conn_max_age})
            for design in DESIGNS:
                say(f"CONN_MAX_AGE={conn_max_age}: sell-out of {sellout_stock} units, {design.name}")
                row, [variant] = _cell(server, design, HOT, stock=sellout_stock, seconds=sellout_seconds, **common)
                time.sleep(1)  # the books are read once the last requests have committed
                books = _books(design, row, variant)
                rows.append(row | books | {"kind": "sell-out", "round": 0, "conn_max_age": conn_max_age})
            for row in rows:
                row.setdefault("workers", server.workers)
                row.setdefault("threads", server.threads)
    return rows


def run_wrk_threads(*, threads=(1, 4, 8), seconds: int = 5, connections: int = 64, progress=None) -> list[dict]:
    """Our API and the plain checkout on both workloads, per gunicorn thread count (production's
    ``CONN_MAX_AGE``): what ``config/gunicorn.conf.py``'s default threads are chosen by."""
    say = progress or (lambda message: None)
    _, token = _buyer_token()
    rows = []
    for count in threads:
        env = {"DJANGO_SETTINGS_MODULE": "bench.http_settings", "CONN_MAX_AGE": "60"}
        with Server(workers=2 * os.cpu_count(), threads=count, **env) as server:
            common = {"token": token, "connections": connections}
            for design in (OURS, CHECKOUT):
                _cell(server, design, HOT, stock=AMPLE, seconds=1, **common)
            for workload in WORKLOADS:
                for design in (OURS, CHECKOUT):
                    say(f"{count} threads per worker: {workload.title}, {design.name}")
                    row, _ = _cell(server, design, workload, stock=AMPLE, seconds=seconds, **common)
                    rows.append(row | {"kind": "threads", "workers": server.workers, "threads": count})
    return rows


def threads_table(rows: list[dict]) -> list[str]:
    """The report's markdown for ``run_wrk_threads``."""
    if not rows:
        return []
    body = [
        [
            row["threads"],
            next(w.title for w in WORKLOADS if w.name == row["workload"]),
            f"**{row['design']}**" if row["design"] == OURS.name else row["design"],
            f"{row['requests_per_s']:,.0f}",
            f"{row['p50_ms']:.1f}",
            f"{row['p99_ms']:.1f}",
            f"{row['cores_busy']:.2f}",
        ]
        for row in rows
    ]
    return [
        f"gunicorn threads per worker ({rows[0]['workers']} workers, `CONN_MAX_AGE` 60, one round of "
        f"{statistics.median(r['seconds'] for r in rows):.0f} s per cell, wrk at {rows[0]['connections']} "
        "connections): `config/gunicorn.conf.py` takes its default from these. More threads let more buyers "
        "of a hot SKU queue for one batch; on 3-SKU carts they mostly add lock waits.",
        "",
        *_table(["threads", "workload", "design", "requests/s", "p50 ms", "p99 ms", "cores busy"], body),
    ]


def _table(header: list[str], body: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in body]


def _cells(rows, conn_max_age, workload, design) -> list[dict]:
    return [
        r
        for r in rows
        if r["kind"] == "ample"
        and r["conn_max_age"] == conn_max_age
        and r["workload"] == workload.name
        and r["design"] == design.name
    ]


def _median(rows, key) -> float:
    return statistics.median(row[key] for row in rows)


def _ratios(rows, conn_max_age, workload) -> list[list[float]]:
    """Per target, the ratio of each round."""
    by_round = {}
    for design in (OURS, CHECKOUT, DRF_FLOOR):
        for row in _cells(rows, conn_max_age, workload, design):
            by_round.setdefault(row["round"], {})[design.name] = row
    ratios = [[], [], []]
    for cells in by_round.values():
        ours, checkout, floor = (cells.get(d.name) for d in (OURS, CHECKOUT, DRF_FLOOR))
        if ours and checkout and checkout["requests_per_s"]:
            ratios[0].append(ours["requests_per_s"] / checkout["requests_per_s"])
        if ours and floor and floor["requests_per_s"]:
            ratios[1].append(ours["requests_per_s"] / floor["requests_per_s"])
        if ours and floor and floor["p99_ms"]:
            ratios[2].append(ours["p99_ms"] / floor["p99_ms"])
    return ratios


def _non_2xx(count: int, statuses: dict) -> str:
    return f"{count:,} ({_statuses(statuses)})" if count else "0"


def _statuses(statuses: dict) -> str:
    return ", ".join(f"{code}: {count:,}" for code, count in statuses.items() if not 200 <= code < 300) or "-"


def wrk_table(rows: list[dict]) -> list[str]:
    """The report's markdown: the server and load, the cells (medians over rounds), the targets, the sell-outs."""
    first = rows[0]
    conn_max_ages = list(dict.fromkeys(row["conn_max_age"] for row in rows))
    ample = [row for row in rows if row["kind"] == "ample"]
    rounds = len({row["round"] for row in ample})
    lines = [
        f"gunicorn with {first['workers']} workers (2 x cores) of {first['threads']} threads on "
        "`bench.http_settings` (the shop's settings and middleware; the baselines routed beside the API), "
        f"wrk with {first['wrk_threads']} threads and {first['connections']} connections, "
        f"{statistics.median(r['seconds'] for r in ample):.0f} s per cell"
        + (f", {rounds} rounds (medians)" if rounds > 1 else "")
        + ". Every request a fresh Idempotency-Key; one unit per SKU per cart. Designs: our "
        "`POST /api/orders/`; the plain Django checkout (`bench.http_views.checkout_plain`: one transaction, "
        "`select_for_update()` in pk order, `F()` updates, the order, its lines, reservation and ledger rows, "
        "behind the order API's authentication, throttle and body validation); the DRF floor (the same "
        "authentication, throttle and middleware, one guarded UPDATE per line); the bare floor (a plain "
        "Django view, no authentication, the same UPDATEs). Client, server, MariaDB and Redis share the cores; "
        "*cores busy* is the whole machine's (/proc/stat) while wrk ran. `CONN_MAX_AGE` 0 opens a database "
        "connection per request (development's default); 60 keeps one per server thread (production's).",
        "",
    ]
    body = []
    for conn_max_age in conn_max_ages:
        for workload in WORKLOADS:
            floor = _cells(rows, conn_max_age, workload, DRF_FLOOR)
            floor_rate = _median(floor, "requests_per_s") if floor else 0
            for design in DESIGNS:
                cells = _cells(rows, conn_max_age, workload, design)
                if not cells:
                    continue
                rate = _median(cells, "requests_per_s")
                statuses = {}
                for cell in cells:
                    for code, count in cell["statuses"].items():
                        statuses[code] = statuses.get(code, 0) + count
                errors = sum(sum(cell["socket_errors"].values()) for cell in cells)
                body.append(
                    [
                        conn_max_age,
                        workload.title,
                        f"**{design.name}**" if design is OURS else design.name,
                        f"{rate:,.0f}",
                        f"{rate / floor_rate:.2f}" if floor_rate else "-",
                        f"{_median(cells, 'p50_ms'):.1f}",
                        f"{_median(cells, 'p99_ms'):.1f}",
                        _non_2xx(sum(cell["non_2xx"] for cell in cells), statuses),
                        errors or "-",
                        f"{_median(cells, 'cores_busy'):.2f}",
                    ]
                )
    lines += _table(
        [
            "CONN_MAX_AGE",
            "workload",
            "design",
            "requests/s",
            "x DRF floor",
            "p50 ms",
            "p99 ms",
            "non-2xx",
            "socket errors",
            "cores busy",
        ],
        body,
    )
    lines += ["", "Targets (issue 32), ours against the baselines at the same workload:", ""]
    body = []
    for conn_max_age in conn_max_ages:
        for workload in WORKLOADS:
            for (what, wanted, met), ratios in zip(TARGETS, _ratios(rows, conn_max_age, workload), strict=True):
                if not ratios:
                    continue
                median = statistics.median(ratios)
                each = f" (rounds: {', '.join(f'{r:.2f}' for r in ratios)})" if len(ratios) > 1 else ""
                body.append([conn_max_age, workload.title, what, wanted, f"**{median:.2f}x**{each}", _yes(met(median))])
    lines += _table(["CONN_MAX_AGE", "workload", "target", "wanted", "measured", "met"], body)
    sellouts = [row for row in rows if row["kind"] == "sell-out"]
    if sellouts:
        lines += [
            "",
            "Sell-out: each design on a fresh SKU of a few units, one hot SKU. *Oversold* counts units sold beyond "
            "the SKU's restock ledger rows, from the 2xx answers and from the rows (for ours and the checkout the "
            "active and committed reservation rows, for the floors the `reserved` counter). The books agree when "
            "the orders placed, the reservation rows and the counter match and cover every 2xx (for the floors: "
            "the counter covers every 2xx).",
            "",
        ]
        lines += _table(
            [
                "CONN_MAX_AGE",
                "design",
                "units taken / stock",
                "requests/s",
                "2xx",
                "refused (by status)",
                "oversold (told / rows)",
                "books agree",
            ],
            [
                [
                    row["conn_max_age"],
                    row["design"],
                    f"{row['units_taken']} / {row['units_given']}",
                    f"{row['requests_per_s']:,.0f}",
                    f"{row['ok']:,}",
                    _statuses(row["statuses"]),
                    f"{row['oversold_told']} / {row['oversold_rows']}",
                    _yes(row["books_agree"]),
                ]
                for row in sellouts
            ],
        )
    return lines


def _yes(flag: bool) -> str:
    return "yes" if flag else "**no**"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=10, help="per throughput cell")
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--sellout-seconds", type=int, default=5)
    parser.add_argument("--sellout-stock", type=int, default=300, help="units of the SKU each sell-out sells")
    parser.add_argument("--conn-max-age", type=int, nargs="+", default=[0, 60], help="one server per value")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--threads", type=int, default=THREADS, help="gunicorn threads per worker")
    args = parser.parse_args()
    started = time.monotonic()
    rows = run_wrk(
        seconds=args.seconds,
        connections=args.connections,
        sellout_seconds=args.sellout_seconds,
        sellout_stock=args.sellout_stock,
        conn_max_ages=args.conn_max_age,
        rounds=args.rounds,
        threads=args.threads,
        progress=lambda message: print(f"[{time.monotonic() - started:5.0f} s] {message}", file=sys.stderr, flush=True),
    )
    print("\n".join(wrk_table(rows)))


if __name__ == "__main__":
    main()
