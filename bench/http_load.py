"""End to end over HTTP: gunicorn (workers = 2 x cores) and locust buyers placing orders on one hot SKU.

Two runs: one with ample stock (requests/s and latency of placing orders), one that sells a small
stock out (the refusals by error code, and that the units sold never exceed the stock: counted from
the 201 answers and from the reservation rows, against the restock rows, never from the counters).
``run_flash_sale``: 100 units and a crowd for 10 s, with the sold-out marks and without, side by side.

    DATABASE_URL=mysql://root:@127.0.0.1:3306/shop REDIS_URL=redis://127.0.0.1:6379/0 python -m bench.http_load
"""

import argparse
import csv
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

from bench._db import use_bench_database

DATABASE = use_bench_database()

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from knox.models import AuthToken  # noqa: E402

from bench.reserve import units_given_and_taken  # noqa: E402
from bench.shipping import ADDRESS, bench_shipping_method  # noqa: E402
from inventory.models import Stock  # noqa: E402
from inventory.variants import variant_create  # noqa: E402
from orders.models import Order  # noqa: E402

# Threads per gunicorn worker (gthread): requests waiting on a hot SKU's lock queue up in one batch
# instead of holding a whole worker each.
THREADS = 4
ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _server_env(**overrides) -> dict:
    return overrides | {
        "PATH": os.environ["PATH"],
        "DATABASE_URL": os.environ["DATABASE_URL"],
        "REDIS_URL": settings.REDIS_URL,
        "SECRET_KEY": settings.SECRET_KEY,
        "LOCK_KEY_PREFIX": os.environ.get("LOCK_KEY_PREFIX", "bench"),
        # One account places every order here; the per-customer order throttle is for real shops.
        "ORDER_THROTTLE_RATE": "1000000/minute",
        "LOG_LEVEL": "WARNING",
    }


class Server:
    """gunicorn on a free port, started and stopped around a run (``env``: settings for it).

    It serves the checkout at ``root`` (``bench.ab``: another checkout's app, with this bench code).
    """

    def __init__(self, workers: int, threads: int, root: Path = ROOT, **env):
        self.workers, self.threads, self.port = workers, threads, _free_port()
        self.root = root
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = _server_env(**env)

    def __enter__(self):
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            [
                *(BIN / "gunicorn", "--config", "config/gunicorn.conf.py", "config.wsgi"),
                *("--bind", f"127.0.0.1:{self.port}", "--workers", str(self.workers), "--threads", str(self.threads)),
            ],
            cwd=self.root,
            env=self.env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(f"{self.url}/api/products/", timeout=2)
                return self
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.log.seek(0)
                    raise RuntimeError(f"gunicorn did not start:\n{self.log.read().decode()[-2000:]}") from None
                time.sleep(0.2)

    def __exit__(self, *exc):
        self.proc.terminate()
        self.proc.wait(20)
        self.log.close()


def _locust(url: str, *, sku: str, token: str, users: int, seconds: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        prefix = f"{tmp}/run"
        subprocess.run(
            [
                BIN / "locust",
                "-f",
                ROOT / "bench" / "locustfile.py",
                "--headless",
                "--users",
                str(users),
                "--spawn-rate",
                str(users),
                "--run-time",
                f"{seconds}s",
                "--host",
                url,
                "--csv",
                prefix,
                "--only-summary",
                "--loglevel",
                "ERROR",
            ],
            env=os.environ
            | {
                "BENCH_SKU": sku,
                "BENCH_TOKEN": token,
                "BENCH_ADDRESS": json.dumps(ADDRESS),
                "BENCH_METHOD": str(bench_shipping_method()),
            },
            check=False,  # locust exits 1 when any request "failed"; refusals are expected here
            capture_output=True,
        )
        with open(f"{prefix}_stats.csv") as stats:
            total = next(row for row in csv.DictReader(stats) if row["Name"] == "Aggregated")
        refusals = Counter()
        with open(f"{prefix}_failures.csv") as failures:
            for row in csv.DictReader(failures):
                match = re.search(r"(\d{3} [\w-]+)", row["Error"])
                refusals[match.group(1) if match else row["Error"]] += int(row["Occurrences"])
    requests = int(total["Request Count"])
    return {
        "users": users,
        "seconds": seconds,
        "requests": requests,
        "requests_per_s": float(total["Requests/s"]),
        "p50_ms": float(total["50%"]),
        "p99_ms": float(total["99%"]),
        "answers": Counter({"201 created": requests - int(total["Failure Count"])}) + refusals,
    }


def _buyer() -> tuple[object, str]:
    user, _ = get_user_model().objects.get_or_create(username="bench-buyer", defaults={"email": "bench@example.com"})
    return user, AuthToken.objects.create(user)[1]


def run_http(*, users: int = 64, seconds: int = 15, sellout_stock: int = 500, threads: int = THREADS) -> list[dict]:
    call_command("migrate", verbosity=0)
    user, token = _buyer()
    runs = []
    with Server(workers=2 * os.cpu_count(), threads=threads) as server:
        for label, stock, run_seconds in (("ample stock", 10_000_000, seconds), ("sell-out", sellout_stock, 8)):
            runs.append(_run(server, user, token, label=label, stock=stock, users=users, seconds=run_seconds))
    return runs


def run_flash_sale(*, users: int = 64, seconds: int = 10, stock: int = 100, threads: int = THREADS) -> list[dict]:
    """A flash sale: ``stock`` units, ``users`` buyers for ``seconds``; with the sold-out marks, then without
    (``SOLD_OUT_MARK_SECONDS=0``, today's path), each on a fresh server."""
    call_command("migrate", verbosity=0)
    user, token = _buyer()
    runs = []
    for label, mark_seconds in (("flash sale: sold-out marks (ours)", None), ("flash sale: marks off", 0)):
        env = {} if mark_seconds is None else {"SOLD_OUT_MARK_SECONDS": str(mark_seconds)}
        with Server(workers=2 * os.cpu_count(), threads=threads, **env) as server:
            runs.append(_run(server, user, token, label=label, stock=stock, users=users, seconds=seconds))
    return runs


def _run(server: Server, user, token: str, *, label: str, stock: int, users: int, seconds: int) -> dict:
    """Locust buyers on a fresh SKU of ``stock`` units; their answers, and the books read afterwards."""
    sku = f"HTTP-{uuid.uuid4().hex[:8].upper()}"
    variant = variant_create(sku=sku, name="HTTP bench", price="1.00", initial_stock=stock)
    result = _locust(server.url, sku=sku, token=token, users=users, seconds=seconds)
    time.sleep(3)  # orders still in flight when locust stopped commit before the books are read
    books = Stock.objects.get(variant=variant)
    placed = Order.objects.filter(customer=user, lines__variant=variant).count()
    [(given, taken)] = units_given_and_taken([variant])
    return result | {
        "label": label,
        "stock": stock,
        "workers": server.workers,
        "threads": server.threads,
        "orders_placed": placed,
        "units_reserved": books.reserved,
        # Each 201 told a buyer one unit is theirs; each active or committed reservation row holds one.
        "oversold_told": max(0, result["answers"]["201 created"] - given),
        "oversold_rows": max(0, taken - given),
        # Orders in flight when locust stops are placed but never answered: placed >= 201s.
        "books_agree": placed == books.reserved and placed >= result["answers"]["201 created"],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=64)
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--threads", type=int, default=THREADS)
    parser.add_argument("--sellout-stock", type=int, default=500, help="units of the SKU the sell-out run sells")
    parser.add_argument("--flash-sale", action="store_true", help="only the flash sale: 100 units, 10 s, marks on/off")
    args = parser.parse_args()
    if args.flash_sale:
        runs = run_flash_sale(users=args.users, threads=args.threads)
    else:
        runs = run_http(users=args.users, seconds=args.seconds, sellout_stock=args.sellout_stock, threads=args.threads)
    for run in runs:
        print(run)


if __name__ == "__main__":
    main()
