"""Celery tasks of after-sales work. ``send_order_emails`` keeps the name it had under ``orders.tasks``:
beat's schedule names it, and an old beat host still does during an upgrade."""

import logging

from celery import shared_task

from fulfilment.emails import order_email_list_send
from orders.tasks import RETRYABLE

logger = logging.getLogger(__name__)


@shared_task(
    name="orders.tasks.send_order_emails", autoretry_for=RETRYABLE, retry_backoff=1, retry_backoff_max=30, max_retries=3
)
def send_order_emails() -> int:
    """The emails orders are due (placed, paid, failed, expired, refunded), each sent once."""
    sent = order_email_list_send()
    if sent:
        logger.info("order emails: %d sent", sent)
    return sent
