"""Run a function in several real OS processes at once against the shared MariaDB and Redis.

Processes are forked after Django is set up (so they use the test database); each child drops the
inherited connections first. A barrier makes them start together.
"""

import multiprocessing
import threading
import time
from collections.abc import Callable
from contextlib import contextmanager

from django.db import connections

from inventory import batching
from inventory.locks import lock_list, sku_locks
from tests.processes import die_with_parent

_ctx = multiprocessing.get_context("fork")
_barrier = None


def _init(barrier):
    global _barrier
    _barrier = barrier
    die_with_parent()  # a pool worker of a test run killed from outside ends with it
    connections.close_all()


def _call(job):
    func, kwargs = job
    return func(**kwargs)


def run_parallel(func, jobs: list[dict], *, processes: int, barrier: bool = False, timeout: float = 300):
    """Call ``func(**job)`` for each job across ``processes`` workers; return the results in job order."""
    connections.close_all()
    start = _ctx.Barrier(processes) if barrier else None
    with _ctx.Pool(processes, initializer=_init, initargs=(start,)) as pool:
        result = pool.map_async(_call, [(func, job) for job in jobs], chunksize=1)
        return result.get(timeout)


def wait_for_peers():
    """Inside a worker started with ``barrier=True``: block until every worker is here."""
    _barrier.wait(timeout=60)


def run_process(func, **kwargs) -> int:
    """Run ``func(**kwargs)`` in one forked process to completion; return its exit code."""
    process = start_process(func, **kwargs)
    process.join(60)
    return process.exitcode


def start_process(func, **kwargs) -> multiprocessing.Process:
    """Start ``func(**kwargs)`` in a forked process and return at once (to signal or stop it)."""
    connections.close_all()
    process = _ctx.Process(target=_init_and_call, args=(func, kwargs))
    process.start()
    return process


def _init_and_call(func, kwargs):
    die_with_parent()
    connections.close_all()
    func(**kwargs)


@contextmanager
def holding(skus):
    """Hold the SKUs' locks from another thread (as another process's payment would) for the block."""
    taken, done = threading.Event(), threading.Event()

    def hold():
        with sku_locks(skus):
            taken.set()
            done.wait(30)

    holder = threading.Thread(target=hold)
    holder.start()
    taken.wait(10)
    try:
        yield
    finally:
        done.set()
        holder.join()


def queue_one_by_one(target, jobs: list, *, sku: str = "HOT", hold_after: float = 0):
    """Start a forked ``target(**job, out=queue)`` per job behind a held lock on ``sku``, each once the
    one before is queued; let go ``hold_after`` seconds after the last.

    The first then holds the lock and serves the others, in this order, in one batch. A job that is
    a callable is called instead, and must queue one entry of its own (a crafted request, say).
    Returns the processes and the queue their answers arrive on.
    """
    out = _ctx.Queue()
    processes = []
    with holding([sku]):
        connections.close_all()
        for count, job in enumerate(jobs, start=1):
            if callable(job):
                job()
            else:
                process = _ctx.Process(target=target, kwargs=job | {"out": out})
                process.start()
                processes.append(process)
            deadline = time.monotonic() + 20
            while not any(lock["sku"] == sku and lock["waiters"] == count for lock in lock_list()):
                assert time.monotonic() < deadline, f"job {count} never queued"
                time.sleep(0.01)
        time.sleep(hold_after)
    return processes, out


def answers_of(processes, out, count: int, *, timeout: float = 60) -> dict:
    """Wait for ``processes`` and collect the ``count`` (key, answer) pairs they put on ``out``."""
    for process in processes:
        process.join(timeout)
    return dict(out.get(timeout=5) for _ in range(count))


def batch_sizes_recorded(monkeypatch, kind: str, path) -> Callable[[], list[int]]:
    """Patch the batch runner so that every batch of ``kind`` run (here and in processes forked after)
    appends its size to ``path``; return a function reading them."""
    run = batching.batch_run
    path.write_text("")

    def recording(batch_type, requests):
        if batch_type.kind == kind:
            with open(path, "a") as sizes:
                sizes.write(f"{len(requests)}\n")
        return run(batch_type, requests)

    monkeypatch.setattr(batching, "batch_run", recording)
    return lambda: [int(line) for line in path.read_text().splitlines()]
