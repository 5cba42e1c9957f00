"""The Celery app: ``celery -A config worker`` and ``celery -A config beat``.

Configuration lives in Django settings under the ``CELERY_`` namespace (config/settings.py).
"""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("shop")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
