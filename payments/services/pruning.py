"""Payment events kept only for a while: a processed one is kept ``PAYMENT_EVENT_KEEP_DAYS`` (its id refuses
a provider's redelivery meanwhile; Stripe redelivers for three days). Payments and refunds are the books
and are never pruned."""

from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from core.db import delete_in_batches
from payments.models import PaymentEvent


def payment_event_list_prune() -> int:
    """Delete processed payment events older than ``PAYMENT_EVENT_KEEP_DAYS``; unprocessed ones stay."""
    before = timezone.now() - timedelta(days=settings.PAYMENT_EVENT_KEEP_DAYS)
    return delete_in_batches(PaymentEvent.all_objects.filter(processed_at__lt=before))
