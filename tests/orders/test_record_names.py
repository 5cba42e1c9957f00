"""How the admin names a return and a refund: by the order's number, never two bare ids ("return 1 of 2")."""

from decimal import Decimal

from fulfilment.models import ReturnRequest
from orders.models import Order
from payments.models import Refund


def test_a_return_is_named_by_its_order_number_not_read_as_one_of_two():
    order = Order(pk=2, number="W7K2M9QX", currency="EUR")

    named = str(ReturnRequest(pk=1, order=order, state=ReturnRequest.State.REQUESTED))

    assert named == "Return #1 for order W7K2M9QX (requested)"


def test_a_refund_is_named_by_its_amount_with_currency_and_its_order_number():
    order = Order(pk=2, number="W7K2M9QX", currency="EUR")

    named = str(Refund(pk=3, order=order, amount=Decimal("5.00"), state=Refund.State.REQUESTED))

    assert named == "Refund #3 of €5.00 for order W7K2M9QX (requested)"
