"""Paying in tests: a recording provider, and the buyer's and the provider's steps as one-liners."""

from inventory import locks
from orders.services import order_place
from payments.models import Payment
from payments.providers.local import LocalProvider, local_event
from payments.services import order_pay
from tests.conftest import webhook_deliver

RETURN_URL = "http://testserver/orders/"


class RecordingProvider(LocalProvider):
    """The local provider, plus hooks that run *while* a checkout is started or a refund is asked for,
    and a record of both. The ``provider`` fixture (tests/conftest.py) makes it the shop's provider."""

    during_checkout = None
    during_refund = None
    checkouts: list = []
    refunds: list = []  # the payments asked to refund, by reference
    refund_requests: list = []  # (reference, amount, idempotency key) of each request
    expired: list = []

    def checkout_start(self, *, order, **checkout):
        RecordingProvider.checkouts.append({"order": order.number, "locks_held": locks.held_skus()})
        if RecordingProvider.during_checkout:
            hook, RecordingProvider.during_checkout = RecordingProvider.during_checkout, None
            hook(order)
        return super().checkout_start(order=order, **checkout)

    def refund(self, *, payment, amount=None, key=""):
        RecordingProvider.refunds.append(payment.reference)
        RecordingProvider.refund_requests.append((payment.reference, amount, key))
        if RecordingProvider.during_refund:
            hook, RecordingProvider.during_refund = RecordingProvider.during_refund, None
            hook(payment)

    def checkout_expire(self, *, payment):
        RecordingProvider.expired.append(payment.reference)

    @classmethod
    def reset(cls) -> None:
        cls.checkouts, cls.refunds, cls.refund_requests, cls.expired = [], [], [], []
        cls.during_checkout = cls.during_refund = None


def place(customer, key, quantity=2, sku="MUG"):
    return order_place(customer=customer, items=[{"sku": sku, "quantity": quantity}], idempotency_key=key)


def start(order) -> Payment:
    return order_pay(order=order, return_url=RETURN_URL)


def succeed(payment: Payment) -> None:
    webhook_deliver(local_event("checkout.session.completed", payment=payment))


def fail(payment: Payment) -> None:
    webhook_deliver(local_event("checkout.session.async_payment_failed", payment=payment))
