"""Order services: placing, quoting, status changes and sweeps. Stock moves only through ``inventory``;
paying and refunding are ``payments``', shipping and returns ``fulfilment``'s.

Callers import from here; each module holds one part of an order's life.
"""

from orders.services.claiming import order_list_claim
from orders.services.hold_checkout import order_hold_checkout
from orders.services.holding import drop_line_pass
from orders.services.lifecycle import order_cancel, order_expire, order_fail_payment, order_reservations_settle
from orders.services.placing import order_place
from orders.services.pruning import order_email_list_prune
from orders.services.quoting import order_quote
from orders.services.sweeps import SweepResult, order_release_expired, order_release_failed_payments

__all__ = [
    "SweepResult",
    "drop_line_pass",
    "order_hold_checkout",
    "order_cancel",
    "order_email_list_prune",
    "order_expire",
    "order_fail_payment",
    "order_list_claim",
    "order_place",
    "order_quote",
    "order_release_expired",
    "order_release_failed_payments",
    "order_reservations_settle",
]
