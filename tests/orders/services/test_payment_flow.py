"""Payment happens outside the stock lock; whoever changes the status first wins; a losing charge is refunded."""

from datetime import timedelta

import pytest
from django.utils import timezone

from core.errors import InvalidInput
from inventory import locks
from inventory.models import StockMovement
from orders.errors import OrderNotFound
from orders.models import Order
from orders.payments import PaymentResult, SimulatedGateway
from orders.services import order_cancel, order_expire, order_pay, order_place
from shop.errors import ProductUnavailable
from tests.conftest import assert_books_balance, stock_of

pytestmark = pytest.mark.django_db


class RecordingGateway(SimulatedGateway):
    """The simulated gateway, plus a hook that runs *during* the charge and a record of refunds."""

    during_charge = None
    charges: list = []
    refunds: list = []

    def charge(self, *, order, amount, token):
        RecordingGateway.charges.append({"order": order.number, "locks_held": locks.held_skus()})
        if RecordingGateway.during_charge:
            hook, RecordingGateway.during_charge = RecordingGateway.during_charge, None
            hook(order)
        return super().charge(order=order, amount=amount, token=token)

    def refund(self, *, order, reference):
        RecordingGateway.refunds.append(reference)


@pytest.fixture
def gateway(settings):
    settings.PAYMENT_GATEWAY = "tests.orders.services.test_payment_flow.RecordingGateway"
    RecordingGateway.charges, RecordingGateway.refunds, RecordingGateway.during_charge = [], [], None
    return RecordingGateway


def place(customer, key, quantity=2, sku="MUG"):
    return order_place(customer=customer, items=[{"sku": sku, "quantity": quantity}], idempotency_key=key)


def test_the_gateway_is_called_with_no_stock_lock_held(make_product, customer, gateway):
    make_product(sku="MUG", stock=5)
    order_pay(order=place(customer, "k"))
    assert gateway.charges == [{"order": gateway.charges[0]["order"], "locks_held": frozenset()}]


def test_a_double_click_charges_twice_but_pays_once_and_refunds_the_loser(make_product, customer, gateway):
    mug = make_product(sku="MUG", stock=5)
    order = place(customer, "k")
    gateway.during_charge = lambda o: order_pay(order=o)  # the second click lands during the first charge

    paid = order_pay(order=order)

    assert paid.status == Order.Status.PAID
    assert len(gateway.charges) == 2 and len(gateway.refunds) == 1
    assert gateway.refunds[0] != paid.payment_reference
    assert StockMovement.objects.filter(order=order, kind="commit").count() == 1
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (3, 0)
    assert_books_balance(mug)


def test_when_the_sweeper_expires_the_order_during_the_charge_it_is_reserved_again(make_product, customer, gateway):
    mug = make_product(sku="MUG", stock=5)
    order = place(customer, "k")
    Order.objects.filter(pk=order.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    gateway.during_charge = lambda o: order_expire(order=o)

    paid = order_pay(order=order)

    assert paid.status == Order.Status.PAID and gateway.refunds == []
    assert list(StockMovement.objects.filter(order=order).values_list("kind", flat=True)) == [
        "reserve",
        "release",
        "reserve",
        "commit",
    ]
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (3, 0)
    assert_books_balance(mug)


def test_when_the_order_is_cancelled_during_the_charge_the_charge_is_refunded(make_product, customer, gateway):
    mug = make_product(sku="MUG", stock=5)
    order = place(customer, "k")
    gateway.during_charge = lambda o: order_cancel(order=o)

    with pytest.raises(Exception) as error:
        order_pay(order=order)

    assert error.value.code == "order_not_payable"
    assert len(gateway.refunds) == 1
    assert Order.objects.get(pk=order.pk).status == Order.Status.CANCELLED
    assert stock_of(mug).reserved == 0
    assert_books_balance(mug)


def test_an_expired_order_of_a_product_no_longer_for_sale_is_not_reserved_again(make_product, customer):
    mug = make_product(sku="MUG", stock=5)
    order = place(customer, "k")
    Order.objects.filter(pk=order.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    order_expire(order=order)
    mug.is_active = False
    mug.save()

    with pytest.raises(ProductUnavailable):
        order_pay(order=order)
    assert Order.objects.get(pk=order.pk).status == Order.Status.EXPIRED
    assert stock_of(mug).reserved == 0


def test_a_deleted_order_can_be_neither_paid_nor_cancelled(make_product, customer):
    mug = make_product(sku="MUG", stock=5)
    order = place(customer, "k")
    order.delete()
    for action in (order_pay, order_cancel):
        with pytest.raises(OrderNotFound) as error:
            action(order=order)
        assert error.value.code == "order_not_found"
    assert stock_of(mug).reserved == 2


def test_guest_keys_are_scoped_by_email(make_product):
    mug = make_product(sku="MUG", stock=10)
    items = [{"sku": "MUG", "quantity": 1}]
    ann = order_place(email="Ann@Example.com", items=items, idempotency_key="checkout-1")
    bob = order_place(email="bob@example.com", items=items, idempotency_key="checkout-1")
    again = order_place(email="ann@example.com ", items=items, idempotency_key="checkout-1")

    assert ann.pk != bob.pk and again.pk == ann.pk
    assert ann.email == "ann@example.com"
    assert stock_of(mug).reserved == 2


@pytest.mark.parametrize("email", ["", None, "not-an-email", "a" * 250 + "@example.com", 42])
def test_a_guest_needs_a_valid_email(make_product, email):
    mug = make_product(sku="MUG", stock=10)
    with pytest.raises(InvalidInput) as error:
        order_place(email=email, items=[{"sku": "MUG", "quantity": 1}], idempotency_key="k")
    assert "email" in error.value.payload["fields"]
    assert stock_of(mug).reserved == 0 and not Order.all_objects.exists()


def test_a_declined_charge_is_not_refunded_and_fails_the_order(make_product, customer, gateway):
    mug = make_product(sku="MUG", stock=5)
    order = place(customer, "k")
    with pytest.raises(Exception) as error:
        order_pay(order=order, payment_token="decline")
    assert error.value.code == "payment_declined"
    assert gateway.refunds == []
    assert Order.objects.get(pk=order.pk).status == Order.Status.PAYMENT_FAILED
    assert stock_of(mug).reserved == 0
    assert_books_balance(mug)


def test_a_gateway_that_raises_changes_nothing(make_product, customer, settings, gateway):
    mug = make_product(sku="MUG", stock=5)
    order = place(customer, "k")

    def broken(order):
        raise ConnectionError("gateway down")

    gateway.during_charge = broken
    with pytest.raises(ConnectionError):
        order_pay(order=order)
    assert Order.objects.get(pk=order.pk).status == Order.Status.AWAITING_PAYMENT
    assert stock_of(mug).reserved == 2


def test_simulated_gateway_results():
    assert SimulatedGateway().charge(order=None, amount=1, token="decline") == PaymentResult(
        succeeded=False, message="Card declined (simulated)."
    )
    assert SimulatedGateway().charge(order=None, amount=1, token="").succeeded
