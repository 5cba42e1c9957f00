import logging

from celery import shared_task

from inventory.selectors import stock_books
from orders.selectors import order_list_deleted_holding_stock, order_list_stuck_holding_stock

logger = logging.getLogger(__name__)


@shared_task
def reconcile_stock() -> int:
    """Check the books and shout about any drift; repairs are a person's call (manage.py reconcile --fix)."""
    drifted = [row for row in stock_books() if row.drifted]
    for row in drifted:
        logger.error("STOCK DRIFT %s", row.describe())
    stuck = list(order_list_stuck_holding_stock().values_list("number", flat=True))
    if stuck:
        logger.error("STOCK DRIFT: %d final order(s) still hold stock: %s", len(stuck), ", ".join(stuck[:20]))
    hidden = [
        f"{number} ({status})" for number, status in order_list_deleted_holding_stock().values_list("number", "status")
    ]
    if hidden:
        logger.error(
            "STOCK DRIFT: %d deleted order(s) still hold stock, which no sweep releases: %s",
            len(hidden),
            ", ".join(hidden[:20]),
        )
    return len(drifted) + len(stuck) + len(hidden)
