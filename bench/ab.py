"""The headline cells for two checkouts, before and after a change, interleaved in one run.

    bin/bench --ab BEFORE_CHECKOUT [--after CHECKOUT] [--rounds N] [--duration S] [--json PATH]

A restructure must leave the headline no slower, and on shared cores one cell swings by about 20%
from run to run, so two separate runs do not compare. Here every round runs each cell for both
checkouts back to back, which of them first alternating by round, so a noisy spell hits both alike;
the verdict is the median over rounds of each cell's after/before, PASS when each is at least 0.9.

The cells: one hot SKU and 1,000 SKUs, W=16 ``order_place`` (``bench.reserve``'s in-process
clients), and the hot SKU over HTTP (``POST /api/orders/`` through gunicorn, driven by wrk as
``bench.http_wrk`` does, ``CONN_MAX_AGE`` 60). Each side's cell runs in a subprocess of this bench
code that imports that checkout's app (``bench.targets.use_app``), on a database of the side's own
(each migrates with its own checkout's migrations); its gunicorn serves that checkout's app with this
bench code's ``bench.http_settings`` (``_overlay``). So both sides run the same bench code.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.targets import HERE, app_commit, print_table, use_app

CELLS = {
    "hot": "hot SKU, W=16, order_place",
    "uniform": "1,000 SKUs, W=16, order_place",
    "http": "HTTP hot SKU, POST /api/orders/",
}
SIDES = ("before", "after")
WORKERS = 16
HTTP_CONNECTIONS = 64  # as bench.http_wrk's cells
HTTP_CONN_MAX_AGE = "60"  # production's
WARMUP_CELL_SECONDS = 3.0  # the W=1 cell run first: the first cell after a reset measures low
ALLOWED = 0.9  # after/before, the acceptance's "within 10%"
RESULT = "AB_RESULT "  # marks the child's one line of JSON on its stdout


# --- One side's cell, in a subprocess that imported that side's app ---------------------------


def _in_process(workload: str, duration: float, quiet_wait: float) -> dict:
    from bench import reserve

    reserve.reset_database()
    reserve.wait_for_quiet_machine(timeout=quiet_wait)
    load = reserve.WORKLOADS[workload]
    reserve.run_cell(reserve.OurOrderPlace, load, 1, min(duration, WARMUP_CELL_SECONDS))
    reserve.wait_for_quiet_machine(timeout=quiet_wait)
    cell = reserve.run_cell(reserve.OurOrderPlace, load, WORKERS, duration)
    return {
        "per_s": cell.throughput,
        "p99_ms": cell.p99_ms,
        "cores_busy": cell.machine_busy,
        "errors": dict(cell.errors),
        "oversold": [cell.oversold_told, cell.oversold_rows],
    }


def _overlay(app: Path, into: Path) -> None:
    """Links to ``app``'s top directory, but its ``bench`` is this one: what gunicorn serves.

    Not this bench package put first on gunicorn's path: Celery's Django fix-up puts the working
    directory, where the app is, before it.
    """
    for entry in app.iterdir():
        if entry.name != "bench":
            (into / entry.name).symlink_to(entry)
    (into / "bench").symlink_to(HERE / "bench")


def _http(app: Path, duration: float, quiet_wait: float) -> dict:
    from django.core.management import call_command

    from bench import http_wrk
    from bench.http_load import THREADS, Server
    from bench.reserve import wait_for_quiet_machine

    call_command("migrate", verbosity=0)
    _, token = http_wrk._buyer_token()
    load = {"stock": http_wrk.AMPLE, "token": token, "connections": HTTP_CONNECTIONS}
    with tempfile.TemporaryDirectory() as served:
        _overlay(app, Path(served))
        env = {"DJANGO_SETTINGS_MODULE": "bench.http_settings", "CONN_MAX_AGE": HTTP_CONN_MAX_AGE}
        with Server(workers=2 * os.cpu_count(), threads=THREADS, root=Path(served), **env) as server:
            http_wrk._cell(server, http_wrk.OURS, http_wrk.HOT, seconds=1, **load)  # every worker loads the view
            wait_for_quiet_machine(timeout=quiet_wait)
            row, _ = http_wrk._cell(server, http_wrk.OURS, http_wrk.HOT, seconds=max(1, round(duration)), **load)
    return {
        "per_s": row["requests_per_s"],
        "p99_ms": row["p99_ms"],
        "cores_busy": row["cores_busy"],
        "errors": row["socket_errors"] | ({"non-2xx": row["non_2xx"]} if row["non_2xx"] else {}),
    }


def child(args) -> None:
    use_app(args.app)
    if args.cell == "http":
        result = _http(args.app, args.duration, args.quiet_wait)
    else:
        result = _in_process(args.cell, args.duration, args.quiet_wait)
    print(RESULT + json.dumps(result), flush=True)


# --- The run: both sides, interleaved -----------------------------------------------------------


def _side_database(side: str) -> str:
    """The side's own DATABASE_URL: the two checkouts' migrations need not agree on one schema."""
    server, name = os.environ["DATABASE_URL"].rsplit("/", 1)
    return f"{server}/{name}_ab_{side}"


def _run_side(cell: str, app: Path, side: str, args) -> dict:
    command = [sys.executable, "-m", "bench.ab", "--cell", cell, "--app", str(app)]
    command += ["--duration", str(args.duration), "--quiet-wait", str(args.quiet_wait)]
    env = os.environ | {"DATABASE_URL": _side_database(side)}
    done = subprocess.run(command, cwd=HERE, env=env, stdout=subprocess.PIPE, text=True, check=True)
    line = next(line for line in reversed(done.stdout.splitlines()) if line.startswith(RESULT))
    return json.loads(line.removeprefix(RESULT))


def run(args) -> dict:
    apps = {"before": args.before, "after": args.after}
    started = time.monotonic()
    cells = {cell: {side: [] for side in SIDES} for cell in CELLS}
    for round_ in range(args.rounds):
        order = SIDES if round_ % 2 == 0 else SIDES[::-1]
        for cell in CELLS:
            for side in order:
                result = _run_side(cell, apps[side], side, args)
                cells[cell][side].append(result)
                print(
                    f"[{(time.monotonic() - started) / 60:5.1f} min] round {round_ + 1} {CELLS[cell]:32} "
                    f"{side:6} {result['per_s']:8.1f}/s  p99 {result['p99_ms']:7.1f} ms  "
                    f"cores busy {result['cores_busy']:.2f}  errors {result['errors'] or '-'}"
                    + ("  oversold (told / rows) {} / {}".format(*result["oversold"]) if "oversold" in result else ""),
                    file=sys.stderr,
                    flush=True,
                )
    return {
        "apps": {side: {"path": str(apps[side]), "commit": app_commit(apps[side])} for side in SIDES},
        "rounds": args.rounds,
        "duration": args.duration,
        "cores": os.cpu_count(),
        "minutes": round((time.monotonic() - started) / 60, 1),
        "cells": cells,
    }


def ratios(cells: dict) -> dict[str, list[float]]:
    """Per cell, each round's after/before: the pair ran back to back, so the machine's noise cancels."""
    return {
        cell: [after["per_s"] / before["per_s"] for before, after in zip(sides["before"], sides["after"], strict=True)]
        for cell, sides in cells.items()
    }


def report(result: dict) -> bool:
    """Print the figures; true if every cell passes (the median of its rounds' ratios)."""
    for side in SIDES:
        print(f"{side}: {result['apps'][side]['path']} ({result['apps'][side]['commit']})")
    print(
        f"{result['rounds']} rounds, {result['duration']} s timed per cell, {result['cores']} cores, "
        f"{result['minutes']} minutes\n"
    )
    rows, passed = [], True
    for cell, each in ratios(result["cells"]).items():
        for side in SIDES:
            per_s = [run["per_s"] for run in result["cells"][cell][side]]
            rows.append([CELLS[cell], side, *(f"{x:.1f}" for x in per_s), f"{statistics.median(per_s):.1f}"])
        median = statistics.median(each)
        passed &= median >= ALLOWED
        judged = "PASS" if median >= ALLOWED else "FAIL"
        rows.append([CELLS[cell], "after/before", *(f"{x:.2f}" for x in each), f"{median:.2f} {judged}"])
    rounds = [f"round {n}" for n in range(1, result["rounds"] + 1)]
    print_table(["cell (per second)", "side", *rounds, "median"], rows, left=(0, 1))
    print(f"\n{'PASS' if passed else 'FAIL'}: after >= {ALLOWED}x before in every cell (median of the rounds' ratios)")
    return passed


def _path(path: str) -> Path:
    return Path(path).resolve()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before", type=_path, nargs="?", help="the checkout before the change")
    parser.add_argument("--after", type=_path, default=HERE, help="the checkout after it (default: this one)")
    parser.add_argument("--rounds", type=int, default=4, help="an even number: each side goes first as often")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds per timed phase")
    parser.add_argument(
        "--quiet-wait", type=float, default=60.0, help="at most this long to wait for idle cores before a cell"
    )
    parser.add_argument("--json", metavar="PATH", type=_path, help="also write the figures there")
    parser.add_argument("--cell", choices=list(CELLS), help=argparse.SUPPRESS)  # the subprocess of one side's cell
    parser.add_argument("--app", type=_path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.cell:
        child(args)
        return
    if args.before is None:
        parser.error("the checkout before the change is required")
    result = run(args)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    sys.exit(0 if report(result) else 1)


if __name__ == "__main__":
    main()
