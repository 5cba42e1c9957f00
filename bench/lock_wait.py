"""How should a waiter wait for a busy SKU lock? Polling (redis-py's default, 0.1 s) against our wake-up.

Real processes contend for one hot lock on the configured Redis, each holding it for a few
milliseconds (a stand-in for the stock transaction). Every design runs side by side in the same run;
the table reports throughput relative to the wake-up lock, wait percentiles and the clients' CPU.

    DATABASE_URL=... REDIS_URL=redis://127.0.0.1:6379/0 python -m bench.lock_wait
"""

import argparse
import multiprocessing
import os
import statistics
import time
import uuid

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.core.cache import caches  # noqa: E402
from redis.lock import Lock  # noqa: E402

from inventory.locks.queue import QueuedLock  # noqa: E402

DESIGNS = {
    "poll 100 ms (redis-py default)": (Lock, 0.1),
    "poll 10 ms": (Lock, 0.01),
    "poll 2 ms": (Lock, 0.002),
    "queued hand-off (ours)": (QueuedLock, settings.LOCK_POLL_SECONDS),
}


def _worker(lock_class, sleep, key, rounds, hold, start, out):
    client = caches[settings.LOCK_CACHE_ALIAS].client.get_client(write=True)
    waits = []
    start.wait()
    cpu0 = sum(os.times()[:2])
    for _ in range(rounds):
        lock = client.lock(key, timeout=10, sleep=sleep, blocking_timeout=60, lock_class=lock_class)
        began = time.perf_counter()
        assert lock.acquire()
        waits.append(time.perf_counter() - began)
        time.sleep(hold)
        lock.release()
    out.put((waits, sum(os.times()[:2]) - cpu0))


def run(lock_class, sleep, workers, rounds, hold):
    ctx = multiprocessing.get_context("fork")
    key = f"bench-lock:{uuid.uuid4().hex}"
    start, out = ctx.Barrier(workers + 1), ctx.Queue()
    procs = [
        ctx.Process(target=_worker, args=(lock_class, sleep, key, rounds, hold, start, out)) for _ in range(workers)
    ]
    for p in procs:
        p.start()
    start.wait()
    began = time.perf_counter()
    results = [out.get() for _ in procs]
    elapsed = time.perf_counter() - began
    for p in procs:
        p.join()
    waits = sorted(w for ws, _ in results for w in ws)
    return {
        "throughput": len(waits) / elapsed,
        "p50": statistics.median(waits) * 1000,
        "p99": waits[int(len(waits) * 0.99) - 1] * 1000,
        "max": waits[-1] * 1000,
        "cpu": sum(cpu for _, cpu in results),
    }


def table(*, workers, rounds: int, hold_ms: float) -> list[str]:
    rows = [
        "| workers | design | acquisitions/s | vs ours | wait p50 ms | wait p99 ms | max wait ms | client CPU s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for count in workers:
        results = {name: run(cls, sleep, count, rounds, hold_ms / 1000) for name, (cls, sleep) in DESIGNS.items()}
        ours = results["queued hand-off (ours)"]["throughput"]
        for name, r in results.items():
            rows.append(
                f"| {count} | {name} | {r['throughput']:.0f} | {r['throughput'] / ours:.2f} | {r['p50']:.1f} "
                f"| {r['p99']:.1f} | {r['max']:.1f} | {r['cpu']:.2f} |"
            )
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[4, 16])
    parser.add_argument("--rounds", type=int, default=60, help="acquisitions per worker")
    parser.add_argument("--hold-ms", type=float, default=3.0)
    args = parser.parse_args()
    print(f"Redis: {settings.REDIS_URL}  hold: {args.hold_ms} ms  rounds per worker: {args.rounds}\n")
    print("\n".join(table(workers=args.workers, rounds=args.rounds, hold_ms=args.hold_ms)))


if __name__ == "__main__":
    main()
