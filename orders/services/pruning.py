"""Rows kept only for a while, pruned so that their tables stop growing with history.

A record of an email sent is kept ``ORDER_EMAIL_KEEP_DAYS``
(it stops a second copy; the email sweep looks back only ``ORDER_EMAIL_WINDOW_SECONDS``). Orders,
payments, refunds and the stock ledger are the books and are never pruned.
"""

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from core.db import delete_in_batches
from orders.models import OrderEmail


def order_email_list_prune() -> int:
    """Delete the records of emails sent longer ago than ``ORDER_EMAIL_KEEP_DAYS``."""
    before = timezone.now() - timedelta(days=settings.ORDER_EMAIL_KEEP_DAYS)
    return delete_in_batches(OrderEmail.all_objects.filter(created_at__lt=before))
