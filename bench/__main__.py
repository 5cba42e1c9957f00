"""Every benchmark in one run; writes docs/benchmarks.md and the plots in docs/bench/.

    DATABASE_URL=mysql://root:@127.0.0.1:3306/shop REDIS_URL=redis://127.0.0.1:6379/0 python -m bench
    (or bin/bench, which sets up the virtualenv and those defaults)

It runs against the configured MariaDB and Redis, in a database of its own (``<name>_bench``), with
real processes as clients. ``--quick`` is a smoke run (fewer clients, shorter phases, a smaller
sweep); its figures are not the ones to quote.
"""

import argparse
import os
import pickle
import platform
import statistics
import sys
import time
from datetime import UTC, datetime
from importlib.metadata import version
from pathlib import Path

import matplotlib  # noqa: E402

from bench import (
    http_load,
    http_wrk,
    lock_wait,
    reserve,  # noqa: I001 - selects the bench database and sets Django up first
    soldout,
    sweep,
    vouchers,
)
from bench.profile import profile_order_place, round_trips
from bench.targets import target_rounds

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.cache import caches  # noqa: E402
from django.db import connection  # noqa: E402

DOCS = Path(__file__).resolve().parent.parent / "docs"
PLOTS = DOCS / "bench"
RESULTS = Path(__file__).resolve().parent.parent / "var" / "bench-results.pickle"  # for --report-only


def machine() -> list[tuple[str, str]]:
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    memory = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal"))
    with connection.cursor() as cursor:
        cursor.execute("SELECT VERSION(), @@innodb_flush_log_at_trx_commit, @@innodb_buffer_pool_size")
        mariadb, flush, pool = cursor.fetchone()
    redis_version = caches[settings.LOCK_CACHE_ALIAS].client.get_client().info("server")["redis_version"]
    return [
        ("CPU", f"{cpu}, {os.cpu_count()} cores (shared by clients, MariaDB and Redis)"),
        ("Memory", f"{memory / 1024 / 1024:.0f} GiB"),
        ("Kernel", platform.release()),
        ("Python", platform.python_version()),
        ("MariaDB", f"{mariadb}, innodb_flush_log_at_trx_commit={flush}, buffer pool {pool // 2**20} MiB"),
        ("Redis", redis_version),
        (
            "Packages",
            ", ".join(
                f"{name} {version(name)}"
                for name in ("Django", "djangorestframework", "django-redis", "redis", "mysqlclient", "gunicorn")
            ),
        ),
    ]


def our_settings(args) -> list[tuple[str, str]]:
    return [
        ("Clients (W)", ", ".join(map(str, args.workers)) + " processes, forked, one DB and Redis connection each"),
        (
            "Timed phase",
            f"{args.duration} s per cell after {reserve.WARMUP} s of warm-up and one untimed purchase; clients "
            "that finish first keep buying, uncounted, until all have finished; each cell (and each timed wrk "
            "cell) starts once the machine's cores are nearly idle",
        ),
        ("Buys", "1 unit per SKU per order; the 3-SKU workload picks 3 of 10 SKUs in random order"),
        (
            "Lock",
            f"TTL {settings.LOCK_TTL_SECONDS} s, wait {settings.LOCK_WAIT_SECONDS} s, "
            f"poll fallback {settings.LOCK_POLL_SECONDS} s, hand-off claim {settings.LOCK_HANDOFF_CLAIM_SECONDS} s",
        ),
        (
            "Batch",
            f"STOCK_BATCH_MAX={settings.STOCK_BATCH_MAX} one-SKU requests per lock hold at most, "
            f"STOCK_BATCH_MIN={settings.STOCK_BATCH_MIN}",
        ),
        ("Isolation", "READ COMMITTED (the shop's setting)"),
    ]


def _table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return lines


def _find(cells, workload, design, workers):
    return next(c for c in cells if c.workload == workload and c.design == design and c.workers == workers)


def _spread(cell) -> str:
    units = cell.units_per_client
    return f"{units[0]} / {statistics.median(units):.0f} / {units[-1]}" if units else "-"


def matrix_tables(cells, workers) -> list[str]:
    out = []
    for workload in reserve.WORKLOADS.values():
        out += ["", f"### {workload.title}", ""]
        rows = []
        for count in workers:
            floor = _find(cells, workload.name, reserve.Floor.name, count).throughput
            for cell in (c for c in cells if c.workload == workload.name and c.workers == count):
                rows.append(
                    [
                        count,
                        f"**{cell.design}**" if cell.ours else cell.design,
                        f"{cell.throughput:,.0f}",
                        f"{cell.throughput / floor:.2f}" if floor else "-",
                        f"{cell.p50_ms:.1f}",
                        f"{cell.p99_ms:.1f}",
                        _spread(cell),
                        f"{cell.cpu_ms_per_op:.2f}",
                        f"{cell.oversold_told} / {cell.oversold_rows}",
                        ", ".join(f"{code} {n}" for code, n in sorted(cell.errors.items())) or "-",
                    ]
                )
        out += _table(
            [
                "W",
                "design",
                "orders/s",
                "x floor",
                "p50 ms",
                "p99 ms",
                "units per client min / median / max",
                "CPU ms per order",
                "oversold (told / rows)",
                "errors",
            ],
            rows,
        )
    return out


# Share of the cores busy from which a run counts as CPU-bound: the whole machine's, kernel included
# (/proc/stat). Our processes' own CPU leaves out the kernel's loopback networking and whatever else
# runs, so it understates how busy the machine is. A step up from a run with less than a fifth of the
# cores free has less than that to grow into, and the added processes cost more CPU per order each
# (wake-ups, cold caches), so such a step is not expected to sell more.
SATURATED = 0.8


def _median_of(rounds, measure) -> tuple[float, str]:
    """The median of ``measure(cells of a round)`` over the rounds, and every round's value for the report."""
    values = [measure(cells) for cells in rounds]
    return statistics.median(values), ", ".join(f"{value:.2f}" for value in values)


def _has(cells, workload, design, workers) -> bool:
    return any(c.workload == workload and c.design == design and c.workers == workers for c in cells)


def _ratio(mine: float, theirs: float) -> float:
    return mine / theirs if theirs else float("inf")


# Issue 32's targets against the plain Django checkout and FOR UPDATE, by workload and W.
WORKLOAD_SHORT = {"hot": "hot SKU", "uniform": "1,000 SKUs", "three": "3-SKU carts"}
PLAIN_WORKERS = (4, 16, 64)  # order_place >= 2x the plain checkout, and its p99 at most the plain's
FOR_UPDATE_WORKERS = (4, 16)  # stock_reserve >= 0.7x FOR UPDATE on 1,000 SKUs and 3-SKU carts


def targets(cells, extra_rounds, workers) -> list[str]:
    def tput(cells, workload, design, count):
        return _find(cells, workload, design, count).throughput

    ours_reserve, ours_place = reserve.OurStockReserve.name, reserve.OurOrderPlace.name
    rounds = [cells, *extra_rounds]
    rows = []

    def ratio_row(title, wanted, design, baseline, factor):
        def measure(round_cells):
            return tput(round_cells, "hot", design, 16) / tput(round_cells, "hot", baseline, 16)

        median, each = _median_of(rounds, measure)
        rows.append([title, f">= {factor}x", f"**{median:.2f}x** (rounds: {each})", median >= factor])

    if 16 in workers:
        ratio_row("hot SKU, W=16: stock_reserve vs seed 000 sell3", 2, ours_reserve, reserve.Sell3.name, 2)
        ratio_row("hot SKU, W=16: stock_reserve vs floor", 0.25, ours_reserve, reserve.Floor.name, 0.25)
        ratio_row("hot SKU, W=16: order_place vs floor", 0.15, ours_place, reserve.Floor.name, 0.15)
    if 64 in workers:
        median, each = _median_of(rounds, lambda round_cells: _find(round_cells, "hot", ours_reserve, 64).p99_ms)
        shown = f"**{median:.0f} ms** (rounds: {each})"
        rows.append(["hot SKU, W=64: stock_reserve p99", "<= 50 ms", shown, median <= 50])
        spreads = [_find(round_cells, "hot", ours_reserve, 64) for round_cells in rounds]
        starved = any(min(cell.units_per_client) == 0 for cell in spreads)
        shown = "; ".join(_spread(cell) for cell in spreads)
        rows.append(["hot SKU, W=64: no client starves (units per client, every round)", "min > 0", shown, not starved])
    saturated = SATURATED * os.cpu_count()
    for design in (ours_reserve, ours_place):
        series = [_find(cells, "uniform", design, count) for count in workers]
        # Each step up in W from a run that left cores idle must sell more; from a saturated run there
        # is nothing left to grow into on this machine (clients, MariaDB and Redis share its cores).
        steps = [(low, high) for low, high in zip(series, series[1:], strict=False) if low.machine_busy < saturated]
        grows = bool(steps) and all(high.throughput > low.throughput for low, high in steps)
        shape = " -> ".join(f"{cell.throughput:,.0f}" for cell in series)
        busy = " -> ".join(f"{cell.machine_busy:.2f}" for cell in series)
        judged = ", ".join(f"W={low.workers}->{high.workers}" for low, high in steps) or "none"
        rows.append(
            [
                f"1,000 SKUs: {design} grows with W while cores are free",
                f"more orders/s at each step up from a W with the machine's cores busy < {saturated:.1f}",
                f"{shape} (cores busy: {busy}; judged: {judged})",
                grows,
            ]
        )

    def versus(title, workload, count, design, baseline, *, factor, p99=False):
        """``design`` against ``baseline``: throughput at least ``factor`` x, or p99 at most ``factor`` x.

        The median over the rounds that ran both cells (the matrix; the hot SKU's W=16 and 64 again).
        """
        wanted = f"p99 <= {factor}x" if p99 else f">= {factor}x"
        ran = [r for r in rounds if _has(r, workload, design, count) and _has(r, workload, baseline, count)]
        if not ran:  # results pickled before the design was added (--report-only)
            rows.append([title, wanted, "not in this run", False])
            return

        def figure(round_cells, name):
            cell = _find(round_cells, workload, name, count)
            return cell.p99_ms if p99 else cell.throughput

        median, each = _median_of(ran, lambda r: _ratio(figure(r, design), figure(r, baseline)))
        mine, theirs = (statistics.median(figure(r, name) for r in ran) for name in (design, baseline))
        figures = f"{mine:,.1f} vs {theirs:,.1f} ms p99" if p99 else f"{mine:,.0f} vs {theirs:,.0f} orders/s"
        every_round = f"; rounds: {each}" if len(ran) > 1 else ""
        met = median <= factor if p99 else median >= factor
        rows.append([title, wanted, f"**{median:.2f}x** ({figures}{every_round})", met])

    plain = reserve.PlainCheckout.name
    for workload, short in WORKLOAD_SHORT.items():
        for count in (count for count in PLAIN_WORKERS if count in workers):
            title = f"{short}, W={count}: order_place"
            versus(f"{title} vs plain checkout", workload, count, ours_place, plain, factor=2)
            versus(f"{title} p99 vs plain checkout's", workload, count, ours_place, plain, factor=1, p99=True)
    for_update = reserve.SelectForUpdate.name
    for workload in ("uniform", "three"):
        for count in (count for count in FOR_UPDATE_WORKERS if count in workers):
            title = f"{WORKLOAD_SHORT[workload]}, W={count}: stock_reserve vs SELECT ... FOR UPDATE"
            versus(title, workload, count, ours_reserve, for_update, factor=0.7)
    if 64 in workers:
        title = "3-SKU carts, W=64: stock_reserve p99 vs SELECT ... FOR UPDATE's"
        versus(title, "three", 64, ours_reserve, for_update, factor=1.5, p99=True)

    def oversold(title, designs):
        told, taken = sum(c.oversold_told for c in designs), sum(c.oversold_rows for c in designs)
        rows.append([title, "0 / 0", f"{told} / {taken}", told == taken == 0])

    every_cell = [c for round_cells in rounds for c in round_cells]
    oversold(
        "every sell-out of ours, every round: units oversold (from the answers / from the reservation rows)",
        [c for c in every_cell if c.ours],
    )
    oversold(
        "every sell-out of the plain checkout, every round: units oversold (a baseline that oversells is none)",
        [c for c in every_cell if c.design == plain],
    )
    return _table(["target", "wanted", "measured", "met"], [[*row[:3], "yes" if row[3] else "**no**"] for row in rows])


def limits(cells, workers) -> list[str]:
    """What caps our figures, in numbers from this run."""
    if not {16, 64} <= set(workers):
        return ["(Needs W=16 and W=64 in the run.)"]
    ours, floor = _find(cells, "hot", reserve.OurStockReserve.name, 16), _find(cells, "hot", reserve.Floor.name, 16)
    place = _find(cells, "hot", reserve.OurOrderPlace.name, 16)
    ours64 = _find(cells, "hot", reserve.OurStockReserve.name, 64)
    alone = _find(cells, "uniform", reserve.OurStockReserve.name, 1)
    uniform = [_find(cells, "uniform", reserve.OurStockReserve.name, count) for count in workers]
    cores = os.cpu_count()
    mean64 = 64_000 / ours64.throughput  # ms, Little's law for 64 clients buying back to back
    spread64 = ours64.p99_ms / mean64
    needed64 = 64 * spread64 / 0.050  # orders/s for p99 <= 50 ms at this spread
    served_share64 = ours64.buy_cpu_p50_ms * ours64.ops / (ours64.cpu["clients"] * 1000)

    def split(cell):
        return ", ".join(f"{name} {used * 1000 / cell.ops:.2f}" for name, used in cell.cpu.items())

    return [
        f"- **CPU per order.** On one hot SKU at W=16, `stock_reserve` used {ours.cpu_ms_per_op:.2f} ms of CPU per "
        f"order ({split(ours)}) and `order_place` {place.cpu_ms_per_op:.2f} ms, against "
        f"{floor.cpu_ms_per_op:.2f} ms for the floor's single UPDATE. With {cores} cores shared by everything, "
        f"that caps `stock_reserve` near {cores * 1000 / ours.cpu_ms_per_op:,.0f}/s and `order_place` near "
        f"{cores * 1000 / place.cpu_ms_per_op:,.0f}/s; the floor's cap is {cores * 1000 / floor.cpu_ms_per_op:,.0f}/s. "
        "The ratios to the floor are ratios of CPU per order, not of waiting.",
        f"- **Where it goes.** One order alone (no batch to share with) costs {alone.cpu_ms_per_op:.1f} ms of CPU "
        "(the uniform W=1 row): two Redis round trips (acquire-and-wait, whose script also refuses a SKU "
        "marked sold out, and release) "
        "and two SQL round trips (the reservation and ledger INSERTs, the guarded UPDATE and the units it "
        "left, sent together after a savepoint so "
        "nothing is read first, then the COMMIT; the autocommit switches Django's transaction adds around "
        "each commit are not sent between transactions that follow one another, config/mysql). Group commit shares the "
        "holder's part over a batch, so a hot SKU gets "
        "cheaper per order as buyers queue up; each buyer still pays its own Redis round trip, pickling and "
        "Python, and one wake-up (the client share above).",
        f"- **Latency at W=64.** Clients buy back to back, so by Little's law a buyer waits 64 / orders per s "
        f"on average: {mean64:.0f} ms at {ours64.throughput:,.0f}/s. The p99 ({ours64.p99_ms:.0f} ms) was "
        f"{spread64:.1f}x that mean: a buyer waits out the batch in progress and then its own, and one that "
        "re-queues just after the next batch was cut waits a batch more; with 64 processes on "
        f"{cores} cores, when each gets the CPU after its answer decides which batch it makes. (A holder "
        "handed the lock serves those queued behind it at the hand-off, at least STOCK_BATCH_MIN; taking all "
        "who queued by the time it woke made batches alternate between nearly everyone and nearly no one, "
        "and the spread wider.) At that spread "
        f"p99 <= 50 ms needs about {needed64:,.0f} orders/s at W=64. This run used {ours64.cpu_ms_per_op:.2f} ms "
        f"of CPU per order ({split(ours64)}) with the cores {ours64.machine_busy:.1f} of {cores} busy. A buyer "
        f"served by the holder used {ours64.buy_cpu_p50_ms:.2f} ms of it itself (median CPU per purchase: its "
        "request, one Redis round trip and wake-up, and Python that runs slower with 64 processes sharing "
        f"{cores} cores' caches), {served_share64:.0%} of the clients' share; the holders' batches used the "
        "rest. So the buyers' own CPU, not the lock's hand-offs, sets the throughput, and with it (Little's "
        "law) the wait; the cores left idle are the gaps between a batch's answers and the next batch. "
        "Designs with p99 <= 50 ms at W=64 in this run: "
        + (", ".join(c.design for c in cells if c.workload == "hot" and c.workers == 64 and c.p99_ms <= 50) or "none")
        + ".",
        "- **1,000 SKUs.** Orders rarely meet on a SKU, so there is no batch to share: every order pays the "
        "full path. Cores busy (the whole machine's, kernel included, from /proc/stat) by W: "
        + ", ".join(f"W={cell.workers} {cell.machine_busy:.1f}" for cell in uniform)
        + f". Once the {cores} cores are busy, throughput stops growing and more processes only add "
        "wake-ups: the clients' CPU per order by W is "
        + ", ".join(f"{cell.cpu['clients'] * 1000 / cell.ops:.2f}" for cell in uniform if cell.ops)
        + " ms (each order blocks and wakes on six round trips, and with more processes each wake-up "
        "finds colder caches). The locks never serialise different SKUs (no global lock), the CPU does: "
        f"a single lock held for a whole order ({alone.p50_ms:.1f} ms at W=1, p50) would cap the shop at "
        f"{1000 / alone.p50_ms:,.0f} orders/s, and W={uniform[1].workers} sold {uniform[1].throughput:,.0f}/s.",
        *three_sku_limits(cells, workers),
        "- **seed 000 sell3 on 3-SKU orders** takes one global lock per SKU inside its transaction: a buyer "
        "holding a row lock waits for the global lock while the global lock's holder waits for that row, "
        "until the python-redis-lock expires (3 s). It deadlocks rather than oversells there.",
    ]


def three_sku_limits(cells, workers) -> list[str]:
    """Why 3-SKU carts and 1,000 SKUs stay below ``FOR UPDATE``: the figures that say it, from this run."""
    rows = [w for w in (4, 16) if w in workers]
    if not rows:
        return []
    fields = []
    for w in rows:
        ours = _find(cells, "three", reserve.OurStockReserve.name, w)
        bare = _find(cells, "three", reserve.SelectForUpdate.name, w)
        fields.append(
            f"W={w}: ours {ours.throughput:,.0f}/s with the cores {ours.machine_busy:.1f} busy, "
            f"{ours.cpu_ms_per_op:.2f} ms of CPU per order; FOR UPDATE {bare.throughput:,.0f}/s, "
            f"{bare.cpu_ms_per_op:.2f} ms"
        )
    alone = []
    for w in rows:
        no_lock = _find(cells, "uniform", reserve.OurRowsNoLock.name, w)
        bare = _find(cells, "uniform", reserve.SelectForUpdate.name, w)
        alone.append(f"W={w} {no_lock.throughput:,.0f}/s ({no_lock.throughput / bare.throughput:.2f}x FOR UPDATE)")
    return [
        "- **3-SKU carts** over 10 SKUs make 71% of any two orders share a SKU, so a cart mostly waits for "
        "another cart's locks: "
        + "; ".join(fields)
        + ". A cart takes its free locks in one script call and releases them in one, and writes its rows "
        "and guarded UPDATEs in one round trip; what is left of its hold is the transaction's round trips "
        "and the Python between them, where FOR UPDATE holds its rows for one SELECT, one UPDATE and the "
        "COMMIT of a bare table.",
        "- **What our rows cost alone.** On 1,000 SKUs, with no lock and no batching around them, our "
        "reservation and ledger INSERTs with the guarded UPDATE did "
        + ", ".join(alone)
        + ": MariaDB's CPU for the rows the shop keeps (a reservation and a ledger row per line) bounds "
        "`stock_reserve` below FOR UPDATE on a bare table before any lock is taken.",
    ]


def plot(cells, workers) -> list[str]:
    PLOTS.mkdir(parents=True, exist_ok=True)
    files = []
    for metric, label, scale in (("throughput", "orders/s", "log"), ("p99_ms", "p99 latency (ms)", "log")):
        fig, axes = plt.subplots(1, len(reserve.WORKLOADS), figsize=(15, 4.5), sharey=False)
        for ax, workload in zip(axes, reserve.WORKLOADS.values(), strict=True):
            for design in dict.fromkeys(c.design for c in cells):
                series = [_find(cells, workload.name, design, count) for count in workers]
                ours = series[0].ours
                ax.plot(
                    workers,
                    [getattr(cell, metric) or None for cell in series],
                    marker="o",
                    linewidth=2.5 if ours else 1.2,
                    linestyle="-" if ours else "--",
                    label=design,
                )
            ax.set_xscale("log", base=2)
            ax.set_xticks(workers, [str(w) for w in workers])
            ax.set_yscale(scale)
            ax.set_title(workload.title)
            ax.set_xlabel("client processes (W)")
            ax.set_ylabel(label)
            ax.grid(True, which="both", alpha=0.3)
        axes[-1].legend(fontsize=8, loc="best")
        fig.tight_layout()
        name = f"{metric.split('_')[0]}.png"
        fig.savefig(PLOTS / name, dpi=110)
        plt.close(fig)
        files.append(name)
    return files


def http_table(runs: list[dict]) -> list[str]:
    return _table(
        [
            "run",
            "stock",
            "seconds",
            "requests",
            "req/s",
            "p50 ms",
            "p99 ms",
            "answers",
            "orders placed (incl. in flight at the stop)",
            "units reserved",
            "oversold (told / rows)",
            "books agree",
        ],
        [
            [
                run["label"],
                f"{run['stock']:,}",
                run["seconds"],
                run["requests"],
                f"{run['requests_per_s']:.0f}",
                run["p50_ms"],
                run["p99_ms"],
                ", ".join(f"{answer}: {n}" for answer, n in sorted(run["answers"].items())),
                run["orders_placed"],
                run["units_reserved"],
                f"{run['oversold_told']} / {run['oversold_rows']}",
                run["books_agree"],
            ]
            for run in runs
        ],
    )


def flash_sale_target(refusals) -> list[str]:
    found = soldout.medians(refusals)
    rows = []
    for workers in sorted({w for w, _ in found}):
        ours = found[(workers, soldout.OurReserveRefusal.name)]["rate"]
        floor = found[(workers, soldout.FloorRefusal.name)]["rate"]
        rows.append(
            [
                f"hot sold-out SKU, W={workers}: our refusal (stock_reserve) vs the floor's refusal",
                ">= 1x",
                f"**{ours / floor:.2f}x**",
                "yes" if ours >= floor else "**no**",
            ]
        )
    return _table(["target", "wanted", "measured (medians)", "met"], rows)


def write_report(
    args,
    cells,
    extra_rounds,
    http_runs,
    sweep_results,
    lock_rows,
    trips,
    profile_text,
    refusals,
    flash_runs,
    wrk_rows=(),  # results pickled before the wrk cells (--report-only) have none
    threads_rows=(),
    voucher_cells=(),
) -> Path:
    lines = [
        "# Benchmarks",
        "",
        f"Generated by `python -m bench` on {args.finished:%Y-%m-%d %H:%M} UTC "
        f"in {args.minutes:.1f} minutes{' (--quick: smoke figures)' if args.quick else ''}. "
        "Re-run it to get your own; every ratio below compares designs measured side by side in that one run.",
        "",
        "## Machine and settings",
        "",
        *_table(["", ""], machine() + our_settings(args)),
        "",
        "## Targets",
        "",
        "Each hot-SKU ratio at W=16 and W=64 is the median over three rounds: the hot-SKU cells below, then",
        "the same designs twice more, side by side in each round (one cell swings by about 20% between runs",
        "on these shared cores). The others (W=4, 1,000 SKUs, 3-SKU carts) are the one round of the matrix",
        "below. The plain Django checkout is the competitor for `order_place`, bare `SELECT ... FOR UPDATE`",
        "for `stock_reserve` (issue 32).",
        "",
        *targets(cells, extra_rounds, args.workers),
        "",
        "## What limits the figures",
        "",
        *limits(cells, args.workers),
        "",
        "## Reservations: throughput and latency",
        "",
        "Each cell: W client processes buy for the timed phase on fresh rows with ample stock, then race a",
        "small stock to a sell-out; *oversold* counts units sold beyond stock in that race, twice: from what",
        "buyers were told (successful purchases per row) and from the rows (for ours the active and committed",
        "reservation rows, for the bare table its `reserved` column, which has no CHECK), each against the units",
        "the rows were given (for ours the restock ledger rows), never from the `Stock` counters, which the CHECK",
        "`reserved <= on_hand` bounds (seed 000's `sell3` releases its lock before its commit and shows it).",
        "*x floor* is throughput over the guarded",
        "UPDATE's at the same W. *CPU ms per order* adds the clients', MariaDB's and Redis's CPU time in the",
        "timed phase: on two shared cores it is what caps throughput. Latency is per purchase, lock wait",
        "included. The floor and the articles' designs run on a bare table (no ledger, no CHECKs);",
        "`stock_reserve` reserves orders placed beforehand (lines at hand); `order_place` is the full",
        "service: order, lines, reservation and ledger rows, idempotency. The *plain Django checkout*",
        "(`bench.http_views.checkout_plain`) is what a Django developer writes, roughly Saleor's: no Redis lock,",
        "one transaction that locks the cart's stock rows with `select_for_update()` in primary-key order,",
        "checks them, reserves with `F()` UPDATEs and creates the order, its lines and the same reservation",
        "and ledger rows through the ORM (`bulk_create`), on the shop's tables. *Our rows, no lock*",
        "(`bench.reserve.OurRowsNoLock`) is `stock_reserve`'s own round trip of SQL (the reservation and",
        "ledger INSERTs and the guarded UPDATEs after a savepoint) in a transaction, with no Redis lock and",
        "no batching: what our writes cost by themselves. Its errors are InnoDB deadlocks between buyers of",
        "the same SKUs, which the lock's queue prevents.",
        "",
        "![throughput](bench/throughput.png)",
        "",
        "![p99](bench/p99.png)",
        *matrix_tables(cells, args.workers),
        "",
        "## End to end over HTTP",
        "",
        f"gunicorn with {http_runs[0]['workers']} workers (2 x cores) of {http_runs[0]['threads']} threads, locust "
        f"({http_runs[0]['users']} users, no think time) POSTing one-unit orders of one hot SKU to",
        "`/api/orders/` with a token and a fresh Idempotency-Key each. Clients, server, MariaDB and Redis",
        "share the same two cores.",
        "",
        *http_table(http_runs),
        "",
        *(["## HTTP baselines with wrk", "", *http_wrk.wrk_table(wrk_rows), ""] if wrk_rows else []),
        *([*http_wrk.threads_table(threads_rows), ""] if threads_rows else []),
        "## Flash sale: refusals after a sell-out",
        "",
        "Once a hot SKU is sold out, nearly every request of the crowd is a refusal. W client processes ask",
        "for one unit of a SKU with none free (`bench/soldout.py`), each design side by side at each W, three",
        "rounds. The floor's refusal is the guarded UPDATE matching no row on the bare table. Ours answers",
        "from the SKU's sold-out mark in Redis (`inventory.locks.soldout`): `stock_reserve` with one MGET",
        "(a process that found the mark lately reads it first; the first refusal comes from the acquire",
        "script, in the round trip that would have queued it); `order_place` with the MGET and then the",
        "look-up of an order placed earlier under the same idempotency key (a retry of an order that took",
        "the last unit is told its order). Today's path is the same service with the marks off: queue for",
        "the lock, read under it, refuse.",
        "",
        *flash_sale_target(refusals),
        "",
        *soldout.refusal_table(refusals),
        "",
        "Over HTTP: gunicorn as above, locust's users buying one unit each of a SKU with 100 units for 10",
        "seconds, with the marks and without them (`SOLD_OUT_MARK_SECONDS=0`), each on a fresh server.",
        "",
        *http_table(flash_runs),
        "",
        *(
            [
                "## Flash sale: a voucher with 100 uses",
                "",
                "W client processes place one-unit orders of one hot SKU, each as a new guest, side by side",
                "(`bench/vouchers.py`), three rounds, each cell on a fresh SKU and voucher: without a voucher,",
                "with a 10% voucher that never runs out (what its row lock, counter and use rows cost), and with",
                f"a 10% voucher of {vouchers.LIMITED} uses raced (the first {vouchers.LIMITED} orders get it, the",
                "rest are refused `used_up` after queueing like any order). *Answers/s* counts orders placed and",
                "refused. *Over-redeemed* is the uses beyond the limit by what buyers were told, by the",
                "voucher's counters, by its use rows and by the orders stored with its discount.",
                "",
                *vouchers.voucher_table(voucher_cells),
                "",
            ]
            if voucher_cells
            else []
        ),
        "## Expiry sweep",
        "",
        f"{args.sweep_orders:,} overdue orders over 200 SKUs, each sweep on identical fresh data "
        "(`bench/sweep.py`). Batched: each claimed batch is expired in one short stock section with the",
        "same statements however many orders it holds; one by one: each order in a section of its own",
        "(the sweep before batches, on fewer orders); the floor is three set-based UPDATEs. Two buyers place",
        "orders on the swept SKUs meanwhile.",
        "",
        *sweep.sweep_table(sweep_results, args.sweep_orders),
        "",
        "## Waiting for a busy lock",
        "",
        "16 processes on one lock held 3 ms each (`bench/lock_wait.py`): polling against our queued hand-off.",
        "",
        *lock_rows,
        "",
        "## Round trips per order (pinned by tests/inventory/test_round_trips.py)",
        "",
        *_table(["path", "SQL round trips (as Django counts them, BEGIN included)", "Redis round trips"], trips),
        "",
        "## Profile of the hot path",
        "",
        "pyinstrument over one process placing one-SKU orders back to back (`bench/profile.py`):",
        "",
        "```",
        profile_text.strip(),
        "```",
        "",
    ]
    report = DOCS / "benchmarks.md"
    report.write_text("\n".join(lines))
    return report


def report_write(results) -> Path:
    args, cells, *_ = results
    plot(cells, args.workers)
    return write_report(*results)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: W=1,4,16, short phases, small sweep")
    parser.add_argument("--report-only", action="store_true", help=f"rewrite the report from {RESULTS.name}")
    args = parser.parse_args()
    if args.report_only:
        print(report_write(pickle.loads(RESULTS.read_bytes())))
        return
    args.workers = [1, 4, 16] if args.quick else list(reserve.WORKERS)
    args.duration = 1.0 if args.quick else 3.0
    args.sweep_orders = 1000 if args.quick else 10_000
    started = time.monotonic()

    def step(message):
        print(f"[{(time.monotonic() - started) / 60:5.1f} min] {message}", file=sys.stderr, flush=True)

    step("round trips and profile")
    reserve.reset_database()
    trips = round_trips()
    profile_text = profile_order_place(orders=100 if args.quick else 400)
    step("reservation matrix")
    cells = reserve.run_matrix(
        workloads=list(reserve.WORKLOADS),
        workers=args.workers,
        designs=reserve.DESIGNS,
        duration=args.duration,
        progress=step,
    )
    step("the target cells again, twice")
    extra_rounds = target_rounds(rounds=2, workers=args.workers, duration=args.duration, progress=step, plain=True)
    step("HTTP end to end")
    http_runs = http_load.run_http(users=16 if args.quick else 64, seconds=5 if args.quick else 15)
    step("HTTP baselines with wrk")
    wrk_rows = http_wrk.run_wrk(
        seconds=2 if args.quick else 5,
        rounds=1 if args.quick else 5,
        conn_max_ages=(0,) if args.quick else (0, 60),
        progress=step,
    )
    step("gunicorn threads per worker")
    threads_rows = http_wrk.run_wrk_threads(threads=(4,) if args.quick else (1, 4, 8), seconds=2 if args.quick else 5)
    step("flash sale: refusals after a sell-out")
    refusals = soldout.run_refusals(
        workers=[16] if args.quick else list(soldout.WORKERS),
        duration=args.duration,
        rounds=1 if args.quick else 3,
        progress=step,
    )
    step("flash sale: a voucher with 100 uses")
    voucher_cells = vouchers.run_vouchers(
        workers=[16] if args.quick else list(vouchers.WORKERS),
        duration=args.duration,
        rounds=1 if args.quick else 3,
        progress=step,
    )
    step("flash sale over HTTP")
    flash_runs = http_load.run_flash_sale(users=16 if args.quick else 64, seconds=5 if args.quick else 10)
    step("lock waiting")
    lock_rows = lock_wait.table(workers=[16], rounds=20 if args.quick else 60, hold_ms=3.0)
    step(f"expiry sweep of {args.sweep_orders} orders")
    sweep_results = sweep.run_sweep(orders=args.sweep_orders, baseline_orders=args.sweep_orders // 10)
    args.minutes, args.finished = (time.monotonic() - started) / 60, datetime.now(UTC)
    results = (args, cells, extra_rounds, http_runs, sweep_results, lock_rows, trips, profile_text)
    results += (refusals, flash_runs, wrk_rows, threads_rows, voucher_cells)
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_bytes(pickle.dumps(results))
    report = report_write(results)
    step(f"wrote {report}")


if __name__ == "__main__":
    main()
