"""A charge whose commit was never heard is settled from what the database holds, never refunded on a guess.

The payment's transaction (order paid, charge captured, stock committed) loses its connection at the
COMMIT: killed for real just before it (the server rolls back), or after the server committed (the
acknowledgement is lost). Either way the buyer ends with a paid order and a charge kept once, or a
charge refunded once; never a paid order whose charge was refunded.
"""

from datetime import timedelta

import MySQLdb
import pytest
from django.conf import settings
from django.db import OperationalError, connection

from core.db import LOST_CONNECTION
from inventory.models import StockMovement
from orders.models import Order
from orders.services import order_cancel, order_place
from payments.models import Payment
from payments.services import paying, payment_list_settle
from tests.conftest import pay, stock_of
from tests.faults.conftest import assert_books

pytestmark = pytest.mark.django_db(transaction=True)


def _kill(thread_id: int) -> None:
    db = settings.DATABASES["default"]
    killer = MySQLdb.connect(host=db["HOST"], port=int(db["PORT"] or 3306), user=db["USER"], password=db["PASSWORD"])
    try:
        killer.cursor().execute(f"KILL CONNECTION {thread_id}")
    finally:
        killer.close()


def _at_the_next_commit(monkeypatch, fault):
    """Run ``fault(real_commit)`` in place of the COMMIT of the transaction that first applies the payment
    (order paid, charge captured, stock committed), as its success webhook is processed."""
    real_commit, real_apply = connection._commit, paying._payment_apply
    armed, applied = [], []

    def commit():
        if armed:
            armed.clear()
            return fault(real_commit)
        return real_commit()

    def apply_then_arm(order, payment):
        result = real_apply(order, payment)
        if not applied:
            applied.append(True)
            armed.append(True)
        return result

    monkeypatch.setattr(connection, "_commit", commit)
    monkeypatch.setattr(paying, "_payment_apply", apply_then_arm)


def test_a_payment_whose_connection_is_killed_at_the_commit_is_applied_once_and_never_refunded(
    make_variant, customer, provider, monkeypatch
):
    mug = make_variant(sku="MUG", stock=5)
    order = order_place(customer=customer, items=[{"sku": "MUG", "quantity": 2}], idempotency_key="k")

    def kill_then_commit(real_commit):
        _kill(connection.connection.thread_id())
        return real_commit()  # the server rolled the payment back: this raises

    _at_the_next_commit(monkeypatch, kill_then_commit)

    paid = pay(order)

    # The database said the charge was not applied; the order could still be paid, so it was, once.
    [payment] = Payment.objects.all()
    assert paid.status == Order.Status.PAID and paid.payment_reference == payment.reference
    assert payment.state == Payment.State.CAPTURED and provider.refunds == []
    assert StockMovement.objects.filter(order=order, kind="commit").count() == 1
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (3, 0)
    assert_books(mug)


def test_a_payment_committed_whose_acknowledgement_is_lost_is_kept_not_refunded(
    make_variant, customer, provider, monkeypatch
):
    mug = make_variant(sku="MUG", stock=5)
    order = order_place(customer=customer, items=[{"sku": "MUG", "quantity": 2}], idempotency_key="k")

    def commit_then_lose_the_answer(real_commit):
        real_commit()
        _kill(connection.connection.thread_id())
        raise OperationalError(LOST_CONNECTION, "Lost connection to server during query")

    _at_the_next_commit(monkeypatch, commit_then_lose_the_answer)

    paid = pay(order)

    [payment] = Payment.objects.all()
    assert paid.status == Order.Status.PAID and paid.payment_reference == payment.reference
    assert payment.state == Payment.State.CAPTURED and provider.refunds == []
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (3, 0)
    assert_books(mug)


def test_charges_a_dead_payer_left_unsettled_are_applied_or_refunded_by_the_sweep(make_variant, customer, provider):
    mug = make_variant(sku="MUG", stock=5)
    payable = order_place(customer=customer, items=[{"sku": "MUG", "quantity": 1}], idempotency_key="a")
    cancelled = order_place(customer=customer, items=[{"sku": "MUG", "quantity": 1}], idempotency_key="b")
    fresh = order_place(customer=customer, items=[{"sku": "MUG", "quantity": 1}], idempotency_key="c")
    order_cancel(order=cancelled)
    # Charged and recorded, then the payer died (or lost the database) before applying them.
    for order, reference in [(payable, "ch_a"), (cancelled, "ch_b"), (fresh, "ch_c")]:
        Payment.objects.create(
            order=order,
            provider="local",
            reference=reference,
            amount=order.total,
            currency="EUR",
            state=Payment.State.CHARGED,
        )
    Payment.all_objects.exclude(reference="ch_c").update(
        updated_at=Payment.objects.get(reference="ch_c").updated_at - timedelta(minutes=5)
    )

    settled = payment_list_settle(older_than=timedelta(minutes=1))

    assert settled == 2
    states = dict(Payment.objects.values_list("reference", "state"))
    assert states == {"ch_a": "captured", "ch_b": "refunded", "ch_c": "charged"}  # a payer may still hold ch_c
    assert Order.objects.get(pk=payable.pk).status == Order.Status.PAID
    assert Order.objects.get(pk=payable.pk).payment_reference == "ch_a"
    assert provider.refunds == ["ch_b"]
    assert payment_list_settle(older_than=timedelta(minutes=1)) == 0  # settled once
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (4, 1)
    assert_books(mug)


def test_staff_see_an_orders_charges_and_their_state_in_the_admin(make_variant, customer, provider, staff_admin):
    make_variant(sku="MUG", stock=5)
    order = pay(order_place(customer=customer, items=[{"sku": "MUG", "quantity": 1}], idempotency_key="k"))

    page = staff_admin.get(f"/admin/orders/order/{order.pk}/change/")

    assert page.status_code == 200
    assert (
        order.payment_reference in page.content.decode()
        and "Applied: the order is paid with it" in page.content.decode()
    )
