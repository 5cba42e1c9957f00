"""What the sweep benchmarks share: sweepers in processes of their own, and buyers placing orders meanwhile.

Django must be set up before these run (``bench.sweep`` on its bench database, ``bench.history`` on a
seeded one).
"""

import multiprocessing
import random
import time

from django.db import connection, connections


def sweepers_run(workers: int, *, batch: int, one_by_one: bool = False) -> tuple[int, int]:
    """``workers`` sweepers at once until nothing is due: the orders released, and the queries the sweep sent
    (counted with one sweeper, in this process; 0 with several, each in a process of its own)."""
    from orders.services import order_release_expired

    if workers == 1:
        queries = []
        with connection.execute_wrapper(lambda execute, sql, *args: queries.append(sql) or execute(sql, *args)):
            done = order_release_expired(batch_size=batch, one_by_one=one_by_one).done
        return done, len(queries)
    connections.close_all()
    with multiprocessing.get_context("fork").Pool(workers) as pool:
        return sum(pool.map(_sweeper, [(batch, one_by_one)] * workers)), 0


def _sweeper(job: tuple[int, bool]) -> int:
    from orders.services import order_release_expired

    batch, one_by_one = job
    connections.close_all()
    return order_release_expired(batch_size=batch, one_by_one=one_by_one).done


class Buyers:
    """``count`` processes placing one-unit orders on random ``skus`` until stopped: the latencies in ms of
    the orders placed (a refusal, say a SKU sold out, is not timed)."""

    def __init__(self, count: int, skus: list[str], **order):
        self.count, self.skus, self.order = count, skus, order  # ``order``: more of order_place's arguments
        self.context = multiprocessing.get_context("fork")
        self.stop = self.context.Event()
        self.queue = self.context.Queue()

    def __enter__(self):
        connections.close_all()
        self.processes = [self.context.Process(target=self._buy, args=(n,)) for n in range(self.count)]
        for process in self.processes:
            process.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.latencies = [ms for _ in self.processes for ms in self.queue.get(timeout=60)]
        for process in self.processes:
            process.join(10)

    def _buy(self, n: int) -> None:
        from core.errors import DomainError
        from orders.services import order_place

        connections.close_all()
        rng, latencies = random.Random(n), []
        try:
            while not self.stop.is_set():
                started = time.perf_counter()
                try:
                    order_place(
                        email=f"buyer{n}@example.com",
                        items=[{"sku": rng.choice(self.skus), "quantity": 1}],
                        idempotency_key=f"buyer-{n}-{time.monotonic_ns()}",
                        **self.order,
                    )
                except DomainError:
                    continue
                latencies.append((time.perf_counter() - started) * 1000)
        finally:
            self.queue.put(latencies)


def p99(latencies: list[float]) -> float:
    return sorted(latencies)[int(len(latencies) * 0.99)] if latencies else float("nan")
