"""Guest orders an account takes over once it proves it owns their email."""

import logging

from django.db.models import F

from core.collation import Exact
from core.emails import email_address
from orders.models import Order

logger = logging.getLogger(__name__)


def order_list_claim(*, customer, email: str) -> int:
    """Make the guest orders placed with ``email`` ``customer``'s: they show in the account's history and
    its pages. Matched exactly in ``email_address``'s spelling: a look-alike address is someone else's.
    Nothing else about them changes (their buyer, for the limits per customer, stays the email; not even
    ``updated_at``). How many were claimed. Call only once the customer has proven the email theirs."""
    address = email_address(email)
    orders = Order.all_objects.alias(email_exact=Exact("email")).filter(customer=None, email_exact=address)
    claimed = orders.update(customer=customer, updated_at=F("updated_at"))
    if claimed:
        logger.info("user %s claimed %d guest order(s) of %s", customer.pk, claimed, email)
    return claimed
