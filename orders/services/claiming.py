"""Guest orders an account takes over once it proves it owns their email."""

import logging

from django.db.models import F

from orders.models import Order

logger = logging.getLogger(__name__)


def order_list_claim(*, customer, email: str) -> int:
    """Make the guest orders placed with ``email`` (letter case aside) ``customer``'s: they show in the
    account's history and its pages. Nothing else about them changes (their buyer, for the limits per
    customer, stays the email; not even ``updated_at``). How many were claimed. Call only once the
    customer has proven the email theirs."""
    claimed = Order.all_objects.filter(customer=None, email__iexact=email.strip()).update(
        customer=customer, updated_at=F("updated_at")
    )
    if claimed:
        logger.info("user %s claimed %d guest order(s) of %s", customer.pk, claimed, email)
    return claimed
