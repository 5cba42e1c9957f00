"""Order services: placing, paying, status changes and sweeps. Stock moves only through ``inventory``.

Callers import from here; each module holds one part of an order's life.
"""

from orders.services.claiming import order_list_claim
from orders.services.fulfilment import Tracking, order_ship
from orders.services.lifecycle import order_cancel, order_expire, order_fail_payment, order_reservations_settle
from orders.services.paying import (
    order_pay,
    payment_closed,
    payment_failed,
    payment_list_expire_checkouts,
    payment_list_settle,
    payment_refund_confirmed,
    payment_settle,
    payment_succeeded,
)
from orders.services.payment_events import payment_event_list_process, payment_event_process, payment_event_receive
from orders.services.placing import order_place
from orders.services.pruning import order_email_list_prune, payment_event_list_prune
from orders.services.quoting import order_quote
from orders.services.refunds import order_refund, refund_list_settle
from orders.services.returns import return_request_accept, return_request_create, return_request_refuse
from orders.services.reviewing import payment_review_accept, payment_review_refund
from orders.services.sweeps import SweepResult, order_release_expired, order_release_failed_payments

__all__ = [
    "SweepResult",
    "Tracking",
    "order_cancel",
    "order_email_list_prune",
    "order_expire",
    "order_fail_payment",
    "order_list_claim",
    "order_pay",
    "order_place",
    "order_quote",
    "order_refund",
    "order_ship",
    "order_release_expired",
    "order_release_failed_payments",
    "order_reservations_settle",
    "payment_event_list_process",
    "payment_event_list_prune",
    "payment_event_process",
    "payment_event_receive",
    "payment_closed",
    "payment_failed",
    "payment_list_expire_checkouts",
    "payment_list_settle",
    "payment_refund_confirmed",
    "payment_review_accept",
    "payment_review_refund",
    "payment_settle",
    "payment_succeeded",
    "refund_list_settle",
    "return_request_accept",
    "return_request_create",
    "return_request_refuse",
]
