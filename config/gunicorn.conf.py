"""gunicorn's settings for the shop: ``gunicorn -c config/gunicorn.conf.py config.wsgi``.

Workers are processes (the GIL serialises a worker's threads), 2 per core by default; threads let a
worker keep answering while one of its requests waits on MariaDB or for a SKU's lock. The defaults are
what the HTTP benchmarks found best on their machine (docs/benchmarks.md, "HTTP baselines with wrk");
``GUNICORN_WORKERS`` and ``GUNICORN_THREADS`` override them, ``GUNICORN_BIND`` says where to listen.
"""

import multiprocessing
import os

bind = os.environ.get("GUNICORN_BIND", "0.0.0.0:8000")
workers = int(os.environ.get("GUNICORN_WORKERS", 2 * multiprocessing.cpu_count()))
threads = int(os.environ.get("GUNICORN_THREADS", 4))
worker_class = "gthread" if threads > 1 else "sync"
# A request never waits longer than a lock's wait and a database round trip; a stuck worker is replaced.
timeout = int(os.environ.get("GUNICORN_TIMEOUT", 30))


def child_exit(server, worker):
    """prometheus-client's multi-process mode: a dead worker's live gauges leave /metrics with it."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(worker.pid)
