"""A whole drop over HTTP: set the shop up, measure the CPU per request kind, then the crowd at the drop
with the line on, off, and at the plain Django checkout; the report and the plot (``bin/drop``)."""

import argparse
import json
import os
import random
import sys
import time
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRESETS = {  # the crowd and the drop; requests per kind for the CPU, seconds waited for a quiet machine
    "full": {"buyers": 10_000, "seconds": 10.0, "units": 500, "window": 30, "deadline": 150, "admissions": 15.0}
    | {"calibrate": 2000, "quiet": 30, "catalog_after": 20, "scenarios": ("line", "shared", "off", "plain")},
    "quick": {"buyers": 1_000, "seconds": 5.0, "units": 50, "window": 10, "deadline": 25, "admissions": 15.0}
    | {"calibrate": 50, "quiet": 0, "catalog_after": 3, "scenarios": ("line", "off", "plain")},
}
SIZES = 5
ABANDON = 0.1  # of the buyers a drop admits (or whose order is placed), this share never pays
NEWS_EVERY = 2.0  # seconds between a waiting buyer's reads of the shared news (drops/static/drops/line.js)
CATALOG_RATE = 5.0  # GET / a second, through the arrivals and ``catalog_after`` seconds after them
# Requests a second of each kind while its CPU is measured: well below what saturates the shop, so the
# figure is a request's own work, not time spent queueing for the cores.
CALIBRATE_RATES = {"join": 100.0, "poll": 200.0, "news": 200.0, "order": 50.0}
AMPLE = 10_000_000
LINES = ("line", "shared")  # the line on: buyers wait on the push process's stream / poll, news shared


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="bin/drop", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000 buyers in 5 s at 50 units, window 10 s")
    parser.add_argument("--buyers", type=int, help="buyers in the crowd (10,000)")
    parser.add_argument("--seconds", type=float, help="within which they arrive (10)")
    parser.add_argument("--units", type=int, help=f"units of the drop, in {SIZES} sizes (500)")
    parser.add_argument("--window", type=int, help="checkout window (and unpaid orders' hold), seconds (30)")
    parser.add_argument("--deadline", type=int, help="seconds after the first arrival when buyers stop (150)")
    parser.add_argument(
        "--admissions", type=float, help="DROP_ADMISSIONS_PER_SECOND: what this machine serves of admitted buyers (15)"
    )
    parser.add_argument("--scenarios", nargs="+", choices=PRESETS["full"]["scenarios"], help="which, in order")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--report", type=Path, help="markdown to rewrite between its drop:results markers")
    parser.add_argument("--plot", type=Path, help="the PNG (default docs/drop.png; --quick: var/drop-quick.png)")
    parser.add_argument("--again", type=Path, metavar="JSON", help="only the report and plot of a run's raw figures")
    parser.add_argument("--json", type=Path, help="the raw figures (default var/drop.json, var/drop-quick.json)")
    args = parser.parse_args()
    preset = PRESETS["quick" if args.quick else "full"]
    for name, value in preset.items():
        if getattr(args, name, None) is None:
            setattr(args, name, value)
    if args.units % SIZES or args.buyers < 1 or args.seconds <= 0 or args.window < 10:
        parser.error(f"units must be a multiple of {SIZES}, buyers >= 1, seconds > 0, window >= 10")
    tag = "drop-quick" if args.quick else "drop"
    args.plot = args.plot or (ROOT / "var" / f"{tag}.png" if args.quick else ROOT / "docs" / "drop.png")
    args.json = args.json or ROOT / "var" / f"{tag}.json"
    if args.report is None and not args.quick:
        args.report = ROOT / "docs" / "drop.md"
    return args


def say(started: float, message: str) -> None:
    print(f"[{time.monotonic() - started:5.0f} s] {message}", file=sys.stderr, flush=True)


def crowd_of(args, tokens: list[str]) -> list[dict]:
    """Who arrives when (uniformly within ``seconds``, in arrival order), the size each wants, who abandons."""
    rng = random.Random(args.seed)
    arrivals = sorted(rng.uniform(0, args.seconds) for _ in tokens)
    return [
        {"i": i, "token": token, "arrival": at, "size": rng.randrange(SIZES), "abandon": rng.random() < ABANDON}
        for i, (token, at) in enumerate(zip(tokens, arrivals, strict=True))
    ]


def calibrate(shop, args, tokens, drop, skus, ample_sku, shipped) -> dict:
    """The shop's web CPU (gunicorn and the push process) per request of each kind, one kind at a time at
    its rate: joins and reads of the place (the push process's), reads of the news and orders placed
    (``POST /api/orders/``, one unit, shipped: gunicorn's)."""
    count, out = min(args.calibrate, len(tokens)), {}

    def paced(kind: str, requests: list[dict]) -> dict:
        plan = {"scenario": "paced", "kind": kind, "requests": requests, "rate": CALIBRATE_RATES[kind]}
        result = shop.crowd(plan | {"start_at": time.time() + 1.5, "deadline": 600} | shipped)
        ok = sum(n for status, n in result["kinds"].get(kind, {}).get("statuses", {}).items() if int(status) < 300)
        out[kind] = {"requests": len(requests), "ok": ok, "rate": CALIBRATE_RATES[kind]}
        out[kind] |= {"web_ms": (result["cpu"]["gunicorn"] + result["cpu"]["push"]) * 1000 / max(ok, 1)}
        out[kind] |= {"p99_ms": result["kinds"].get(kind, {}).get("p99", 0)}
        return result

    path, at = f"/api/drops/{drop.pk}/line/", shop.push_url
    joins = [
        {"method": "POST", "path": path, "at": at, "headers": {"Authorization": f"Token {t}"}}
        | {"json": {"sku": skus[n % SIZES]}}
        for n, t in enumerate(tokens[:count])
    ]
    passes = [body.get("pass_token", "") for body in paced("join", joins)["bodies"]]
    paced("poll", [{"method": "GET", "path": path, "at": at, "headers": {"X-Drop-Pass": p}} for p in passes])
    paced("news", [{"method": "GET", "path": f"/api/drops/{drop.pk}/news/"} for _ in range(count)])
    orders = [
        {
            "method": "POST",
            "path": "/api/orders/",
            "headers": {"Authorization": f"Token {t}", "Idempotency-Key": f"calibrate-{n}"},
            "json": {"items": [{"sku": ample_sku, "quantity": 1}], "shipping_address": shipped["address"]}
            | {"shipping_method": shipped["method"]},
        }
        for n, t in enumerate(tokens[: count // 2])
    ]
    paced("order", orders)
    return out


def catalog_only(shop, shipped: dict, catalog: dict) -> dict:
    """The catalog side load alone: no buyer, no other request."""
    plan = {"scenario": "paced", "kind": "none", "requests": [], "rate": 1, "deadline": 600, "catalog": catalog}
    return shop.crowd(plan | shipped | {"start_at": time.time() + 1.5})


def main() -> None:
    args = arguments()
    if args.again:
        return write_report(json.loads(args.again.read_text()), args)
    os.environ.setdefault("DATABASE_URL", "mysql://root:@127.0.0.1:3306/dropbench")
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/12")
    os.environ.setdefault("CELERY_BROKER_URL", "redis://127.0.0.1:6379/13")
    os.environ.setdefault("LOCK_KEY_PREFIX", "dropbench")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ["RESERVATION_TTL_SECONDS"] = str(args.window)  # line off: an unpaid order holds as long
    os.environ["DROP_ADMISSIONS_PER_SECOND"] = str(args.admissions)
    from bench._db import use_bench_database

    use_bench_database()
    import django

    django.setup()
    from django.conf import settings
    from django.utils import timezone

    from bench.drop import shop
    from bench.reserve import wait_for_quiet_machine
    from bench.shipping import ADDRESS, bench_shipping_method
    from drops import line

    started = time.monotonic()
    say(started, f"setting up: {args.buyers:,} buyers, {args.units} units in {SIZES} sizes")
    shop.reset()
    setup_started = time.monotonic()
    tokens = shop.buyers_create(args.buyers)
    setup_seconds = time.monotonic() - setup_started
    shipped = {"address": ADDRESS, "method": bench_shipping_method(), "currency": settings.SHOP_CURRENCY}
    each = args.units // SIZES
    variants = {name: shop.sizes_create(name.upper(), sizes=SIZES, units=each) for name in args.scenarios}
    drops = {
        name: shop.drop_create(name, variants[name], line_on=name in LINES, window=args.window)
        for name in args.scenarios
        if name != "plain"
    }
    later = timezone.now() + timedelta(days=1)
    calibration = shop.drop_create(
        "Calibration", shop.sizes_create("CAL", sizes=SIZES, units=each, sale_starts_at=later), line_on=True, window=30
    )
    [ample] = shop.sizes_create("AMPLE", sizes=1, units=AMPLE)
    crowd = crowd_of(args, tokens)
    results = {"args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}, "scenarios": {}}
    results |= {"setup_seconds": setup_seconds, "catalog_rate": CATALOG_RATE}
    results["crowd"] = [{k: v for k, v in b.items() if k != "token"} for b in crowd]
    args.json.parent.mkdir(parents=True, exist_ok=True)
    with shop.Shop() as running:
        for name in LINES:
            if name in drops:
                running.news_wait(drops[name])
        running.news_wait(calibration)
        say(started, "warming up, then the CPU per request kind")
        catalog_only(running, shipped, {"seconds": 2, "rate": 40})  # every worker has served a page
        skus = [v.sku for v in calibration.variants.order_by("pk")]
        results["calibration"] = calibrate(running, args, tokens, calibration, skus, ample.sku, shipped)
        wait_for_quiet_machine(timeout=args.quiet)
        say(started, "catalog alone, no drop")
        catalog = {"seconds": args.seconds + args.catalog_after, "rate": CATALOG_RATE}
        results["catalog_alone"] = catalog_only(running, shipped, catalog)["catalog"]
        for name in args.scenarios:
            wait_for_quiet_machine(timeout=args.quiet)
            say(started, f"the drop: {name}")
            skus = [v.sku for v in variants[name]]
            plan = {
                "scenario": name,
                "drop": drops[name].pk if name in LINES else 0,
                "news_shared": name == "shared",
                "push": name == "line",
                "order_path": "/bench/checkout/" if name == "plain" else "/api/orders/",
                "buyers": [b | {"sku": skus[b["size"]]} for b in crowd],
                "start_at": time.time() + 3,
                "deadline": args.deadline,
                "news_every": NEWS_EVERY,
                "catalog": catalog,
            } | shipped
            result = running.crowd(plan)
            result["events_left"] = shop.events_settled()
            result["books"] = shop.books(variants[name])
            shop.payments_applied(result["buyers"])
            result["placed"] = shop.placed_times(variants[name])
            if name in LINES:
                result["admitted"] = line.line_admitted(drop_id=drops[name].pk)
                drops[name].line_on = False  # its buyers are gone: the runner admits no one more for it
                drops[name].save(update_fields=["line_on"])
            result["start_at"] = plan["start_at"]
            results["scenarios"][name] = result
            args.json.write_text(json.dumps(results))  # kept as it goes: a failure later loses no scenario
    results["seconds"] = time.monotonic() - started
    args.json.write_text(json.dumps(results))
    say(started, f"done; raw figures in {args.json}")
    write_report(results, args)


def write_report(results: dict, args) -> None:
    from bench.drop import report

    text = report.markdown(results)
    print(text)
    report.plot(results, args.plot)
    if args.report:
        report.rewrite(args.report, text)


if __name__ == "__main__":
    main()
