"""Moments and days as people read them, on pages and in emails alike: ``3 Mar 2026, 09:05 UTC`` and
``3 Mar 2026``, in the shop's time zone. Machines get ISO 8601 (``<time datetime>``, the API)."""

from django.utils import timezone
from django.utils.dateformat import format as date_format

MOMENT = "j M Y, H:i T"
DAY = "j M Y"


def moment_format(value) -> str:
    """A date and time to the minute, with the time zone; "" for none."""
    return date_format(timezone.localtime(value), MOMENT) if value else ""


def day_format(value) -> str:
    """The day of a date and time (or a date); "" for none."""
    if not value:
        return ""
    return date_format(timezone.localtime(value) if hasattr(value, "hour") else value, DAY)
