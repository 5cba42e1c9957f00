"""Payment services: starting a payment, applying the provider's events, refunds, staff reviews.

Callers import from here; each module holds one part of a payment's life.
"""

from payments.services.paying import (
    order_pay,
    payment_closed,
    payment_failed,
    payment_list_expire_checkouts,
    payment_list_settle,
    payment_refund_confirmed,
    payment_settle,
    payment_succeeded,
)
from payments.services.payment_events import payment_event_list_process, payment_event_process, payment_event_receive
from payments.services.pruning import payment_event_list_prune
from payments.services.refunds import order_refund, refund_list_settle
from payments.services.reviewing import payment_review_accept, payment_review_refund

__all__ = [
    "order_pay",
    "order_refund",
    "payment_closed",
    "payment_event_list_process",
    "payment_event_list_prune",
    "payment_event_process",
    "payment_event_receive",
    "payment_failed",
    "payment_list_expire_checkouts",
    "payment_list_settle",
    "payment_refund_confirmed",
    "payment_review_accept",
    "payment_review_refund",
    "payment_settle",
    "payment_succeeded",
    "refund_list_settle",
]
