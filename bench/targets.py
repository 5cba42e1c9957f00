"""The hot-SKU targets alone, to compare two versions of the code run in one sitting on one machine.

Runs only the cells the targets read: one hot SKU, ours (``stock_reserve``, ``order_place``) and the
floor side by side, W=1 first as in the matrix, then W=16 and W=64; three rounds. Prints, per round
and as the median, each W=16 ratio to the floor, the W=64 ``stock_reserve`` p99 and the units ours
oversold. It never writes docs/benchmarks.md; ``--json PATH`` keeps the figures for ``--compare``.

    bin/bench --targets --json new.json                    (the app of this checkout)
    bin/bench --targets --app OLD_CHECKOUT --json old.json  (this bench code, another checkout's app)
    python -m bench.targets --compare old.json new.json     (within 10%: exit status 0)
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent  # the checkout this bench code comes from
TARGET_WORKERS = (16, 64)

# Figure: (title, what --compare allows the new run: a ratio at least 0.9x the old, a p99 at most 1.1x).
FIGURES = {
    "reserve_ratio": ("hot W=16 stock_reserve / floor", "ratio"),
    "place_ratio": ("hot W=16 order_place / floor", "ratio"),
    "sell3_ratio": ("hot W=16 stock_reserve / seed 000 sell3", "ratio"),  # with --sell3 only
    "p99_ms": ("hot W=64 stock_reserve p99 ms", "latency"),
}
OVERSOLD = "units oversold by ours (told / rows)"


def target_rounds(
    *, rounds: int, workers, duration: float, progress, sell3: bool = True, plain: bool = False
) -> list[list]:
    """The hot-SKU cells the targets read, run ``rounds`` times, each round side by side.

    On two cores shared with the servers one cell's throughput swings from run to run, so a target
    is judged on the median of its ratio over the rounds. Each round runs the W=1 cells first, as the
    matrix does, so no target cell is a round's first: the first cell after a reset measures low.
    ``plain`` adds the plain Django checkout beside ``order_place`` (the report's targets compare them).
    """
    # Imported here, not above: main() may first point the app's imports at another checkout.
    from bench import reserve

    designs = [reserve.OurStockReserve, reserve.OurOrderPlace]
    designs += [reserve.PlainCheckout] if plain else []
    designs += [reserve.Floor] + ([reserve.Sell3] if sell3 else [])
    counts = [count for count in (1, *TARGET_WORKERS) if count in workers]
    return [
        reserve.run_matrix(workloads=["hot"], workers=counts, designs=designs, duration=duration, progress=progress)
        for _ in range(rounds)
    ]


def figures(cells) -> dict:
    """One round's figures, and the units ours oversold in its sell-outs (told / rows)."""
    from bench import reserve

    hot = {(cell.design, cell.workers): cell for cell in cells if cell.workload == "hot"}
    floor = hot[reserve.Floor.name, 16].throughput
    found = {
        "reserve_ratio": hot[reserve.OurStockReserve.name, 16].throughput / floor,
        "place_ratio": hot[reserve.OurOrderPlace.name, 16].throughput / floor,
        "p99_ms": hot[reserve.OurStockReserve.name, 64].p99_ms,
    }
    if (reserve.Sell3.name, 16) in hot:
        found["sell3_ratio"] = hot[reserve.OurStockReserve.name, 16].throughput / hot[reserve.Sell3.name, 16].throughput
    ours = [cell for cell in cells if cell.ours]
    found["oversold"] = [sum(cell.oversold_told for cell in ours), sum(cell.oversold_rows for cell in ours)]
    return found


def print_table(header: list[str], rows: list[list[str]], left=(0,)) -> None:
    """Columns ``left`` aligned left (words), the others right (figures)."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        cells = (
            cell.ljust(w) if i in left else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        )
        print("  ".join(cells).rstrip())


def _shown(key: str, value) -> str:
    if key == "oversold":
        return "{} / {}".format(*value)
    return f"{value:.1f}" if key == "p99_ms" else f"{value:.2f}"


def report(run: dict) -> None:
    rounds = run["rounds"]
    header = ["figure", *(f"round {n}" for n in range(1, len(rounds) + 1)), "median"]
    rows = [
        [title, *(_shown(key, figs[key]) for figs in rounds), _shown(key, run["median"][key])]
        for key, (title, _) in FIGURES.items()
        if key in run["median"]
    ]
    rows.append(
        [OVERSOLD, *(_shown("oversold", figs["oversold"]) for figs in rounds), _shown("oversold", run["oversold"])]
    )
    print_table(header, rows)


def app_commit(app: Path) -> str:
    done = subprocess.run(["git", "-C", str(app), "describe", "--always", "--dirty"], capture_output=True, text=True)
    return done.stdout.strip() or "unknown (not a git checkout)"


def run(args) -> dict:
    started = time.monotonic()

    def progress(message):
        print(f"[{(time.monotonic() - started) / 60:5.1f} min] {message}", file=sys.stderr, flush=True)

    every_round = target_rounds(
        rounds=args.rounds, workers=(1, *TARGET_WORKERS), duration=args.duration, progress=progress, sell3=args.sell3
    )
    rounds = [figures(cells) for cells in every_round]
    return {
        "app": app_commit(args.app or HERE),
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "minutes": round((time.monotonic() - started) / 60, 1),
        "cores": os.cpu_count(),
        "duration": args.duration,
        "rounds": rounds,
        "median": {key: statistics.median(figs[key] for figs in rounds) for key in FIGURES if key in rounds[0]},
        "oversold": [sum(figs["oversold"][i] for figs in rounds) for i in (0, 1)],  # every round's
        "cells": [[asdict(cell) for cell in cells] for cells in every_round],  # to look into a surprising figure
    }


def _yes(ok: bool) -> str:
    return "yes" if ok else "NO"


def _pooled(paths: str) -> dict:
    """One run from ``paths`` (comma-separated --json files): their rounds together, medians over all.

    Pooled runs of each side, taken alternately, say more than one pair: on shared cores one run's
    three-round median moves from run to run even for the same code.
    """
    runs = [json.loads(Path(path).read_text()) for path in paths.split(",")]
    rounds = [figs for run in runs for figs in run["rounds"]]
    return runs[0] | {
        "app": " ".join(sorted({run["app"] for run in runs})),
        "finished": max(run["finished"] for run in runs),
        "rounds": rounds,
        "median": {key: statistics.median(figs[key] for figs in rounds) for key in FIGURES if key in rounds[0]},
        "oversold": [sum(run["oversold"][i] for run in runs) for i in (0, 1)],
    }


def compare(old_path: str, new_path: str) -> bool:
    """Print two runs side by side; true if every figure of the new one is within 10% of the old one's."""
    old, new = (_pooled(paths) for paths in (old_path, new_path))
    for label, path, each in (("old", old_path, old), ("new", new_path, new)):
        print(
            f"{label}: {path}, app {each['app']}, rounds {len(each['rounds'])} x {each['duration']} s timed, "
            f"{each['cores']} cores, finished {each['finished']}"
        )
    if any(old[key] != new[key] for key in ("duration", "cores")) or len(old["rounds"]) != len(new["rounds"]):
        print("warning: the runs differ in timed phase, rounds or cores; their figures do not compare")
    print()
    rows, met = [], True
    for key, (title, allowed) in FIGURES.items():
        if key not in old["median"] or key not in new["median"]:
            continue
        before, after = old["median"][key], new["median"][key]
        ok = after >= 0.9 * before if allowed == "ratio" else after <= 1.1 * before
        met &= ok
        bound = ">= 0.90" if allowed == "ratio" else "<= 1.10"
        row = [title, _shown(key, before), _shown(key, after), f"{after / before:.2f}", f"{bound}: {_yes(ok)}"]
        rows.append(row)
    clean = new["oversold"] == [0, 0]
    met &= clean
    rows.append(
        [
            OVERSOLD,
            _shown("oversold", old["oversold"]),
            _shown("oversold", new["oversold"]),
            "",
            f"0 / 0: {_yes(clean)}",
        ]
    )
    print_table(["figure (median of the rounds)", "old", "new", "new/old", "within 10%"], rows, left=(0, 4))
    return met


def use_app(app: Path) -> None:
    """Import the app (config, shop, inventory, orders, ...) from ``app`` rather than this checkout.

    The ``bench`` package is already imported from here, so its modules still come from here. The
    working directory moves there too: Celery's Django fix-up puts it first on the import path.
    """
    if not (app / "manage.py").is_file():
        raise SystemExit(f"--app {app}: no manage.py there, not a checkout of the shop")
    sys.path[:] = [str(app)] + [entry for entry in sys.path if Path(entry or ".").resolve() != HERE]
    os.chdir(app)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="the targets take the median of three")
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per timed phase (bin/bench's)")
    parser.add_argument("--sell3", action="store_true", help="seed 000's sell3 too (the sell3 target's cells)")
    parser.add_argument(
        "--json", metavar="PATH", type=lambda path: Path(path).resolve(), help="also write the figures there"
    )
    parser.add_argument(
        "--app",
        metavar="CHECKOUT",
        type=lambda path: Path(path).resolve(),
        help="run against the app code of another checkout (give it a DATABASE_URL name of its own: "
        "the bench database is migrated with that checkout's migrations)",
    )
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("OLD_JSON", "NEW_JSON"),
        help="compare two --json runs (each may be several, comma-separated: their rounds are pooled)",
    )
    args = parser.parse_args(argv)
    if args.compare:
        sys.exit(0 if compare(*args.compare) else 1)
    if args.app:
        use_app(args.app)
    result = run(args)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    print(f"\napp {result['app']}, {result['minutes']} minutes, timed phases of {args.duration} s\n")
    report(result)


if __name__ == "__main__":
    main()
