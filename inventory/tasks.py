import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings

from inventory.selectors import stock_books
from orders.selectors import order_list_final_holding_stock
from shop.clock import db_now

logger = logging.getLogger(__name__)


@shared_task
def reconcile_stock() -> int:
    """Check the books and shout about any drift; repairs are a person's call (manage.py reconcile --fix)."""
    drifted = [row for row in stock_books() if row.drifted]
    for row in drifted:
        logger.error("STOCK DRIFT %s", row.describe())
    # A failed payment's release is queued, not instant: only orders stuck longer than a sweep count.
    grace = db_now() - timedelta(seconds=2 * settings.EXPIRY_SWEEP_SECONDS)
    stuck = list(order_list_final_holding_stock().filter(updated_at__lt=grace).values_list("number", flat=True))
    if stuck:
        logger.error("STOCK DRIFT: %d final order(s) still hold stock: %s", len(stuck), ", ".join(stuck[:20]))
    return len(drifted) + len(stuck)
