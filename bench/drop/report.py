"""The drop bench's figures from what the crowd and the database said: the tables, the targets, the plot."""

import math
import os
import platform
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

from bench.drop.crowd import percentiles

ANSWER_WITHIN = 120.0  # seconds after the first arrival by which every buyer has a final answer
SOLD_OUT_WITHIN = 2.0  # seconds after the last unit's hold by which every waiting buyer knows
TAU_AT_LEAST, CPU_SHARE_AT_MOST, CATALOG_RATIO_AT_MOST = 0.99, 0.5, 2.0
MARKERS = ("<!-- drop:results -->", "<!-- /drop:results -->")
TITLES = {
    "line": "line on, pushed",
    "shared": "line on, polled, news shared",
    "off": "line off",
    "plain": "plain Django checkout",
}
SERVED_BY = {"join": "push process", "poll": "push process", "news": "gunicorn", "order": "gunicorn"}


def _discordant(values: list[int]) -> int:
    """Pairs out of order in ``values`` (merge sort's count of inversions)."""
    if len(values) < 2:
        return 0
    left, right = sorted(values[: len(values) // 2]), sorted(values[len(values) // 2 :])
    count, j = _discordant(values[: len(values) // 2]) + _discordant(values[len(values) // 2 :]), 0
    for value in left:  # for each of the left half, the right half's smaller values come after it
        while j < len(right) and right[j] < value:
            j += 1
        count += j
    return count


def kendall_tau(groups: list[list[int]]) -> float:
    """Kendall's tau (no ties) between order and value over the pairs within each group: 1 when each is sorted."""
    pairs = sum(len(g) * (len(g) - 1) // 2 for g in groups)
    return 1 - 2 * sum(_discordant(g) for g in groups) / pairs if pairs else 1.0


def answered_at(record: dict) -> float:
    """When the buyer had a final answer (admitted and paid, admitted and abandoned, a refusal, or sold
    out: told sold out, they may stay in line for a unit that comes back), or 0."""
    times = [at for at in (record["final_at"] if record["final"] else 0, record["sold_out_at"]) if at]
    return min(times, default=0.0)


def figures(name: str, result: dict, crowd: list[dict], units: int) -> dict:
    """One scenario's figures, times in seconds from the first arrival."""
    start, records = result["start_at"], result["buyers"]
    first = start + crowd[0]["arrival"]
    answered = [r | {"final_at": answered_at(r)} for r in records if answered_at(r)]
    waits = [r["final_at"] - start - crowd[r["i"]]["arrival"] for r in answered]
    paid = [r for r in records if r["final"] == "paid"]
    statuses = Counter()
    for kind in result["kinds"].values():
        statuses.update({int(status): n for status, n in kind["statuses"].items()})
    out = {
        "name": name,
        "buyers": len(records),
        "in_time": sum(r["final_at"] - first <= ANSWER_WITHIN for r in answered),
        "last_answer": max((r["final_at"] - first for r in answered), default=0.0),
        "wait": percentiles(waits),
        "outcomes": Counter(
            r["final"] or ("told sold out, stayed" if r["sold_out_at"] else "no answer") for r in records
        ),
        "books": result["books"],
        "5xx": sum(n for status, n in statuses.items() if status >= 500),
        "timeouts": sum(result["timeouts"].values()),
        "dropped": sum(result["dropped"].values()),
        "fair": sum(r["i"] < units * 1.1 for r in paid) / len(paid) if paid else 0.0,
        "catalog_p99": percentiles([ms for _, ms, _ in result["catalog"]])["p99"],
        "cpu": result["cpu"],
        "crowd_cpu": result["cpu_seconds"],
        "runner_restarts": result["runner_restarts"],
        "kinds": result["kinds"],
        "answered_at": sorted(r["final_at"] - first for r in answered),
    }
    return out | (line_figures(result, crowd, units) if "admitted" in result else {})


def line_figures(result: dict, crowd: list[dict], units: int) -> dict:
    """The line's own: order kept (Kendall tau), how fast admitted buyers and the waiting learned."""
    records, placed = result["buyers"], result["placed"]
    by_ticket = {r["ticket"]: r["i"] for r in records if r.get("ticket")}
    tickets = [t for t in result["admitted"] if t in by_ticket]
    admitted = [by_ticket[t] for t in tickets]
    sizes = sorted({b["size"] for b in crowd})
    size_of = [crowd[i]["size"] for i in admitted]

    def in_size(values: list[int]) -> list[list[int]]:
        return [[v for v, size in zip(values, size_of, strict=True) if size == s] for s in sizes]

    learned = [r["admitted_at"] - placed[r["order"]] for r in records if r.get("order") in placed]
    out = {
        "admitted": len(result["admitted"]),
        "tau_arrival": kendall_tau(in_size(admitted)),
        "tau_across": kendall_tau([admitted]),
        "tau_ticket": kendall_tau(in_size(tickets)),
        "learned": percentiles(learned),
        "polls": sum(r["polls"] for r in records) / len(records),
        "news": sum(r["news"] for r in records) / len(records),
        "streams": sum(r.get("streams", 0) for r in records) / len(records),
    }
    holds = sorted(placed.values())
    if len(holds) < units:
        return out | {"sold_out": None}
    last_hold = holds[units - 1]
    waiting = [
        r
        for r in records
        if r.get("joined_at", math.inf) < last_hold
        and not 0 < r.get("admitted_at", 0) <= last_hold
        and not 0 < r["final_at"] <= last_hold
    ]
    lags = [max(0.0, r["sold_out_at"] - last_hold) if r["sold_out_at"] else math.inf for r in waiting]
    told = {"at": last_hold - result["start_at"] - crowd[0]["arrival"], "waiting": len(waiting)}
    told |= {"within": sum(lag <= SOLD_OUT_WITHIN for lag in lags), "never": lags.count(math.inf)}
    return out | {"sold_out": told | percentiles([lag for lag in lags if lag != math.inf])}


def cpu_per_buyer(results: dict, run: dict) -> dict:
    """Join and wait against an order, in the shop's web CPU ms per buyer: the push process's CPU over
    the line's run (it serves the joins, the place reads and the streams, nothing else) and the news
    reads gunicorn served, at their CPU each (``calibration``); an order's is one ``POST /api/orders/``."""
    cal = {kind: row["web_ms"] for kind, row in results["calibration"].items()}
    used = run["cpu"]["push"] * 1000 + cal["news"] * run["kinds"].get("news", {}).get("count", 0)
    wait = used / run["buyers"]
    return {"join_wait_ms": wait, "order_ms": cal["order"], "share": wait / cal["order"] if cal["order"] else math.inf}


def _table(header: list[str], rows: list[list]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]


def _yes(ok: bool) -> str:
    return "met" if ok else "**missed**"


def _s(value: float) -> str:
    return f"{value:.1f}" if value != math.inf else "never"


def markdown(results: dict) -> str:
    args, units, crowd = results["args"], results["args"]["units"], results["crowd"]
    runs = {name: figures(name, result, crowd, units) for name, result in results["scenarios"].items()}
    lines = {name: run for name, run in runs.items() if "admitted" in run}
    alone = percentiles([ms for _, ms, _ in results["catalog_alone"]])["p99"]
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    out = [
        f"Run of {when} on {platform.machine()} with {os.cpu_count()} cores: `bin/drop"
        + (" --quick" if args["quick"] else "")
        + f"` ({args['buyers']:,} buyers arriving within {args['seconds']:g} s, {units} units in 5 sizes, checkout "
        f"window {args['window']} s, buyers stop {args['deadline']} s after the first arrival). The whole run took "
        f"{results['seconds'] / 60:.1f} minutes; {args['buyers']:,} accounts and tokens were made in "
        f"{results['setup_seconds']:.1f} s.",
        "",
        f"![Buyers with a final answer over time, and the catalog's latency]({Path(args['plot']).name})",
        "",
    ]
    each = runs.values()
    rows = [
        ["final answer within 120 s", *(f"{r['in_time']:,} / {r['buyers']:,}" for r in each)],
        ["no final answer in 120 s", *(f"{r['buyers'] - r['in_time']:,}" for r in each)],
        ["last final answer, s after the first arrival", *(f"{r['last_answer']:.1f}" for r in each)],
        ["arrival to final answer p50 / p99 / max, s", *(_spread(r["wait"]) for r in each)],
        ["final answers", *(_outcomes(r["outcomes"]) for r in each)],
        ["units sold (paid) / stock", *(f"{r['books']['paid']} / {r['books']['stock']}" for r in each)],
        ["oversold (database)", *(r["books"]["oversold"] for r in each)],
        ["5xx answers", *(r["5xx"] for r in each)],
        ["timeouts / dropped connections at the client", *(f"{r['timeouts']} / {r['dropped']}" for r in each)],
        [f"fairness: paid buyers who arrived in the first {units * 1.1:.0f}", *(f"{r['fair']:.1%}" for r in each)],
        [f"catalog `GET /` p99 ms (no drop: {alone:.0f})", *(f"{r['catalog_p99']:.0f}" for r in each)],
        [
            "gunicorn / push process CPU per buyer, ms (whole scenario)",
            *(
                f"{r['cpu']['gunicorn'] * 1000 / r['buyers']:.1f} / {r['cpu']['push'] * 1000 / r['buyers']:.1f}"
                for r in each
            ),
        ],
        ["runner / Celery worker CPU, s", *(f"{r['cpu']['runner']:.1f} / {r['cpu']['worker']:.1f}" for r in each)],
        ["runner CPU per admission (a hold placed), ms", *(_per_admission(r) for r in each)],
        ["the runner died and was started again", *(r["runner_restarts"] for r in each)],
        ["MariaDB / Redis CPU, s", *(f"{r['cpu']['mariadb']:.1f} / {r['cpu']['redis']:.1f}" for r in each)],
        ["the crowd's own CPU, s", *(f"{r['crowd_cpu']:.1f}" for r in each)],
    ]
    out += _table(["", *(TITLES[name] for name in runs)], rows)
    out += ["", "The line's own figures:", ""]
    out += _table(["figure", *(TITLES[name] for name in lines)], _line_rows(lines.values()))
    out += ["", "The shop's web CPU per request (gunicorn and the push process), one kind at a time, no drop:", ""]
    out += _table(
        ["request", "served by", "requests/s", "requests (2xx)", "CPU ms each", "p99 ms"],
        [
            [
                k,
                SERVED_BY[k],
                f"{r['rate']:g}",
                f"{r['requests']:,} ({r['ok']:,})",
                f"{r['web_ms']:.2f}",
                f"{r['p99_ms']:.0f}",
            ]
            for k, r in results["calibration"].items()
        ],
    )
    out += ["", "Requests by kind (ms; statuses other than 2xx):", ""]
    out += _table(
        ["scenario", "kind", "requests", "p50", "p99", "max", "not 2xx"],
        [
            [TITLES[name], kind, f"{k['count']:,}", f"{k['p50']:.0f}", f"{k['p99']:.0f}", f"{k['max']:.0f}", _codes(k)]
            for name, r in runs.items()
            for kind, k in r["kinds"].items()
        ],
    )
    header = ["target", "wanted"] + [cell for name in lines for cell in (TITLES[name], "")]
    rows = list(zip(*(targets(runs, line, results, alone) for line in lines.values()), strict=True))
    out += ["", "Targets:", ""] + _table(header, [row[0][:2] + [c for r in row for c in r[2:]] for row in rows])
    return "\n".join(out) + "\n"


def _line_rows(lines) -> list[list]:
    lines = list(lines)
    told = [line["sold_out"] or {} for line in lines]
    return [
        ["buyers admitted (holds placed for them)", *(line["admitted"] for line in lines)],
        ["Kendall tau, arrival against admission, within each size", *(f"{x['tau_arrival']:.4f}" for x in lines)],
        ["Kendall tau, arrival against admission, across sizes", *(f"{x['tau_across']:.4f}" for x in lines)],
        ["Kendall tau, ticket against admission, within each size", *(f"{x['tau_ticket']:.4f}" for x in lines)],
        ["hold placed to the buyer knowing, p50 / p99 / max, s", *(_spread(x["learned"]) for x in lines)],
        [
            "reads of the place / of the news / streams opened, per buyer",
            *(f"{x['polls']:.1f} / {x['news']:.1f} / {x['streams']:.1f}" for x in lines),
        ],
        ["last unit held, s after the first arrival", *(f"{t['at']:.1f}" if t else "never" for t in told)],
        [
            "waiting then / told sold out within 2 s / never told",
            *(f"{t['waiting']:,} / {t['within']:,} / {t['never']:,}" if t else "-" for t in told),
        ],
        ["told sold out after the last hold, p50 / p99 / max, s", *(_spread(t) if t else "-" for t in told)],
    ]


def _beats(line: float, other: float) -> bool:
    """The line does better, or both are at zero (nothing to beat)."""
    return line < other or line == other == 0


def targets(runs: dict, line: dict, results: dict, alone: float) -> list[list]:
    """The issue's targets for one line scenario: [target, wanted, measured, met]."""
    others = [runs[name] for name in ("off", "plain") if name in runs]
    missing = lambda r: r["buyers"] - r["in_time"]  # noqa: E731
    bad = lambda r: r["5xx"] + r["timeouts"] + r["dropped"]  # noqa: E731
    sold, cpu = line["sold_out"], cpu_per_buyer(results, line)
    ratio = line["catalog_p99"] / alone if alone else math.inf
    vs = lambda key: " vs " + " / ".join(f"{key(r):,.1f}".removesuffix(".0") for r in others)  # noqa: E731
    return [
        [
            "every buyer a final answer",
            "within 120 s of the first arrival",
            f"{line['in_time']:,} / {line['buyers']:,}, last at {line['last_answer']:.1f} s",
            _yes(line["in_time"] == line["buyers"]),
        ],
        [
            "sold out told to every waiting buyer",
            "within 2 s of the last unit's hold",
            f"{sold['within']:,} / {sold['waiting']:,}, max {_s(sold['max'])} s" if sold else "no sell-out",
            _yes(bool(sold) and sold["within"] == sold["waiting"]),
        ],
        ["oversold (database)", "0", line["books"]["oversold"], _yes(line["books"]["oversold"] == 0)],
        [
            "5xx / timeouts at the client",
            "0 / 0",
            f"{line['5xx']} / {line['timeouts']} (dropped: {line['dropped']})",
            _yes(line["5xx"] == 0 and line["timeouts"] == 0),
        ],
        [
            "Kendall tau, arrival against admission (within a size)",
            f">= {TAU_AT_LEAST}",
            f"{line['tau_arrival']:.4f}",
            _yes(line["tau_arrival"] >= TAU_AT_LEAST),
        ],
        [
            "join + wait CPU per buyer (push process, news reads)",
            "<= half an order's",
            f"{cpu['join_wait_ms']:.1f} vs {cpu['order_ms']:.1f} ms ({cpu['share']:.2f}x)",
            _yes(cpu["share"] <= CPU_SHARE_AT_MOST),
        ],
        [
            "catalog p99 during the drop",
            "<= 2x without",
            f"{line['catalog_p99']:.0f} vs {alone:.0f} ms ({ratio:.1f}x)",
            _yes(ratio <= CATALOG_RATIO_AT_MOST),
        ],
        [
            "no final answer in 120 s, vs line off / plain",
            "fewer than both",
            f"{missing(line):,}{vs(missing)}",
            _yes(all(_beats(missing(line), missing(r)) for r in others)),
        ],
        [
            "5xx + timeouts + dropped, vs line off / plain",
            "fewer than both",
            f"{bad(line):,}{vs(bad)}",
            _yes(all(_beats(bad(line), bad(r)) for r in others)),
        ],
        [
            "arrival to final answer p99 s, vs line off / plain",
            "shorter than both",
            f"{line['wait']['p99']:.1f}{vs(lambda r: r['wait']['p99'])}",
            _yes(all(_beats(line["wait"]["p99"], r["wait"]["p99"]) for r in others)),
        ],
    ]


def _per_admission(run: dict) -> str:
    return f"{run['cpu']['runner'] * 1000 / run['admitted']:.1f}" if run.get("admitted") else "-"


def _spread(p: dict) -> str:
    return f"{p['p50']:.1f} / {p['p99']:.1f} / {_s(p['max'])}"


def _outcomes(outcomes: Counter) -> str:
    return ", ".join(f"{name} {n:,}" for name, n in outcomes.most_common())


def _codes(kind: dict) -> str:
    return (
        ", ".join(f"{code}: {n:,}" for code, n in sorted(kind["statuses"].items()) if not 200 <= int(code) < 300) or "-"
    )


def plot(results: dict, path: Path) -> None:
    """Buyers with a final answer over time per scenario, and the catalog's latency beside its no-drop p99."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    units, crowd = results["args"]["units"], results["crowd"]
    figure, (answers, catalog) = pyplot.subplots(1, 2, figsize=(13, 4.8))
    for name, result in results["scenarios"].items():
        run = figures(name, result, crowd, units)
        times = run["answered_at"]
        answers.step([0, *times], range(len(times) + 1), where="post", label=TITLES[name])
        shift = crowd[0]["arrival"]
        catalog.plot(
            [at - shift for at, _, _ in result["catalog"]],
            [ms for _, ms, _ in result["catalog"]],
            ".",
            markersize=3,
            label=TITLES[name],
        )
    answers.axvline(ANSWER_WITHIN, color="grey", linestyle="--", linewidth=1)
    answers.axhline(len(crowd), color="grey", linestyle=":", linewidth=1)
    answers.set(
        xlabel="seconds after the first arrival",
        ylabel="buyers with a final answer",
        title="Buyers with a final answer (dashed: 120 s)",
    )
    alone = percentiles([ms for _, ms, _ in results["catalog_alone"]])["p99"]
    catalog.axhline(alone, color="grey", linestyle="--", linewidth=1, label=f"p99 with no drop ({alone:.0f} ms)")
    catalog.set(
        xlabel="seconds after the first arrival",
        ylabel="ms",
        yscale="log",
        title=f"Catalog GET / at {results['catalog_rate']:g}/s during the drop",
    )
    for axes in (answers, catalog):
        axes.legend(loc="best", fontsize=8)
        axes.grid(alpha=0.3)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)


def rewrite(path: Path, text: str) -> None:
    """Put ``text`` between the results markers of ``path`` (the rest of it is written by hand)."""
    doc = path.read_text() if path.exists() else "\n".join(MARKERS) + "\n"
    head, rest = doc.split(MARKERS[0], 1)
    _, tail = rest.split(MARKERS[1], 1)
    path.write_text(f"{head}{MARKERS[0]}\n{text}{MARKERS[1]}{tail}")
