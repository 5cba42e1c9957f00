"""The Celery app: ``celery -A config worker`` and ``celery -A config beat``.

Configuration lives in Django settings under the ``CELERY_`` namespace (config/settings.py).
"""

import os

from celery import Celery
from celery.signals import worker_process_shutdown

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("shop")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_process_shutdown.connect
def _metrics_forget_process(pid=None, **kwargs):
    """prometheus-client's multi-process mode: a worker child's live gauges leave /metrics with it."""
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid or os.getpid())
