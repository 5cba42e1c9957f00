"""The ASGI entry of the drops' push process: ``uvicorn config.push:app`` (``drops.push`` says what it serves)."""

import os

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
django.setup()

from drops.push import app  # noqa: E402  (after django.setup(): the settings name the Redis)

__all__ = ["app"]
