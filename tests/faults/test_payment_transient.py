"""A busy or unreachable stock lock never refunds a good payment: the charge waits, and the task's retry
or the settle sweep applies it once the lock is back. Only an order that truly cannot be paid refunds."""

import threading
from datetime import timedelta

import pytest
from django.utils import timezone

from inventory import locks
from inventory.errors import LockTimeout, LockUnavailable
from orders.models import Order
from orders.services import order_expire, order_release_expired
from payments.models import Payment, PaymentEvent
from payments.providers.local import local_event
from payments.services import payment_event_process, payment_settle
from tests.conftest import webhook_deliver
from tests.faults.conftest import assert_books
from tests.payments import place, start

pytestmark = pytest.mark.django_db(transaction=True)


class LockHeldElsewhere:
    """Another buyer's thread holds ``sku``'s lock until the block ends (a hot SKU's queue, compressed)."""

    def __init__(self, sku: str):
        self.sku, self.taken, self.done = sku, threading.Event(), threading.Event()

    def _hold(self):
        with locks.sku_locks([self.sku]):
            self.taken.set()
            self.done.wait(30)

    def __enter__(self):
        self.thread = threading.Thread(target=self._hold)
        self.thread.start()
        assert self.taken.wait(10)
        return self

    def __exit__(self, *exc):
        self.done.set()
        self.thread.join(10)


def charged(payment: Payment) -> Payment:
    return Payment.objects.get(pk=payment.pk)


def test_a_success_while_the_lock_is_busy_is_retried_and_then_applied_never_refunded(
    make_variant, customer, provider, settings
):
    settings.LOCK_WAIT_SECONDS = 0.3
    mug = make_variant(sku="MUG", stock=5)
    order = place(customer, "k")
    payment = start(order)

    with LockHeldElsewhere("MUG"), pytest.raises(LockTimeout):  # the task's retry catches it
        webhook_deliver(local_event("checkout.session.completed", payment=payment))
    assert charged(payment).state == Payment.State.CHARGED and provider.refunds == []
    assert PaymentEvent.objects.get().processed_at is None  # the retry (or the event sweep) runs it again

    payment_event_process(event=PaymentEvent.objects.get())  # the retry, the lock free again

    assert Order.objects.get(pk=order.pk).status == Order.Status.PAID
    assert charged(payment).state == Payment.State.CAPTURED and provider.refunds == []
    assert_books(mug)


def test_the_settle_sweep_leaves_a_charge_charged_while_the_lock_is_busy(make_variant, customer, provider, settings):
    settings.LOCK_WAIT_SECONDS = 0.3
    mug = make_variant(sku="MUG", stock=5)
    payment = start(place(customer, "k"))
    Payment.objects.filter(pk=payment.pk).update(state=Payment.State.CHARGED, provider_payment="pi_1")

    with LockHeldElsewhere("MUG"), pytest.raises(LockTimeout):
        payment_settle(payment=payment)
    assert charged(payment).state == Payment.State.CHARGED and provider.refunds == []

    assert payment_settle(payment=payment).state == Payment.State.CAPTURED
    assert provider.refunds == []
    assert_books(mug)


def test_a_success_while_redis_is_down_is_retried_once_it_is_back_never_refunded(
    make_variant, customer, provider, private_redis_settings, settings
):
    """With LOCK_DB_FALLBACK off (on, it is applied under the stock rows' locks: test_redis_outage.py)."""
    settings.LOCK_DB_FALLBACK = False
    redis = private_redis_settings
    mug = make_variant(sku="MUG", stock=5)
    order = place(customer, "k")
    payment = start(order)

    redis.kill()
    with pytest.raises(LockUnavailable):
        webhook_deliver(local_event("checkout.session.completed", payment=payment))
    assert charged(payment).state == Payment.State.CHARGED and provider.refunds == []
    redis.start()

    payment_event_process(event=PaymentEvent.objects.get())

    assert Order.objects.get(pk=order.pk).status == Order.Status.PAID and provider.refunds == []
    assert_books(mug)


def test_an_order_whose_charge_waits_for_the_lock_is_not_expired_meanwhile(make_variant, customer, provider, settings):
    settings.LOCK_WAIT_SECONDS = 0.3
    mug = make_variant(sku="MUG", stock=5)
    order = place(customer, "k")
    payment = start(order)
    with LockHeldElsewhere("MUG"), pytest.raises(LockTimeout):
        webhook_deliver(local_event("checkout.session.completed", payment=payment))
    Order.objects.filter(pk=order.pk).update(expires_at=timezone.now() - timedelta(seconds=1))  # time passes

    assert order_release_expired(batch_size=10).done == 0 and not order_expire(order=order)
    payment_event_process(event=PaymentEvent.objects.get())  # the retry

    assert Order.objects.get(pk=order.pk).status == Order.Status.PAID and provider.refunds == []
    assert_books(mug)


def test_a_charge_taken_within_the_payable_window_revives_its_order_however_late_it_is_applied(
    make_variant, customer, provider, settings
):
    settings.LOCK_WAIT_SECONDS = 0.3
    mug = make_variant(sku="MUG", stock=5)
    order = place(customer, "k")
    payment = start(order)
    Order.objects.filter(pk=order.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert order_expire(order=order)  # expired before the buyer paid, still within its payable window
    with LockHeldElsewhere("MUG"), pytest.raises(LockTimeout):
        webhook_deliver(local_event("checkout.session.completed", payment=payment))
    # Time passes: the order expired 80 minutes ago, the charge came 10 minutes after that, and the lock
    # stayed busy until now, past the payable window (60 minutes after the expiry).
    now = timezone.now()
    Order.objects.filter(pk=order.pk).update(expires_at=now - timedelta(minutes=80))
    Payment.objects.filter(pk=payment.pk).update(charged_at=now - timedelta(minutes=70))

    payment_event_process(event=PaymentEvent.objects.get())

    assert Order.objects.get(pk=order.pk).status == Order.Status.PAID and provider.refunds == []
    assert_books(mug)
