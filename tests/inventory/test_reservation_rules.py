"""The rules of one reservation (``inventory.rules``) hold on every path that takes stock: a rule added
there refuses an order being placed and an order's stock reserved again, with nothing reserved."""

import pytest

from core.errors import DomainError
from inventory import batching
from inventory.models import Reservation
from inventory.rules import reservation_check
from inventory.services import stock_release, stock_reserve
from orders.services import order_place
from tests.conftest import assert_books_balance, stock_of

pytestmark = pytest.mark.django_db(transaction=True)


def hold(monkeypatch) -> None:
    """Add a rule of one reservation, as a new one would be written: no unit of HELD is reserved."""

    def rules(demands, *, left):
        if any(want.sku == "HELD" for want in demands):
            raise DomainError("HELD is on hold.", skus=["HELD"])
        reservation_check(demands, left=left)

    monkeypatch.setattr(batching, "reservation_check", rules)


def test_a_rule_of_one_reservation_refuses_placing_an_order(make_variant, monkeypatch):
    held, mug = make_variant(sku="HELD", stock=5), make_variant(sku="MUG", stock=5)
    hold(monkeypatch)

    with pytest.raises(DomainError) as refused:
        order_place(email="ann@example.com", items=[{"sku": "HELD", "quantity": 1}], idempotency_key="k1")
    order_place(email="ann@example.com", items=[{"sku": "MUG", "quantity": 1}], idempotency_key="k2")

    assert refused.value.payload == {"skus": ["HELD"]}
    assert (stock_of(held).reserved, stock_of(mug).reserved) == (0, 1)
    assert_books_balance(held, mug)


def test_a_rule_of_one_reservation_refuses_reserving_an_orders_stock_again(make_variant, monkeypatch):
    held = make_variant(sku="HELD", stock=5)
    order = order_place(email="ann@example.com", items=[{"sku": "HELD", "quantity": 2}], idempotency_key="k")
    stock_release(order=order, reason=Reservation.ReleaseReason.EXPIRED)  # as an order that expired unpaid
    hold(monkeypatch)

    with pytest.raises(DomainError) as refused:
        stock_reserve(order=order, expires_at=order.expires_at)

    assert refused.value.payload == {"skus": ["HELD"]}
    assert stock_of(held).reserved == 0
    assert_books_balance(held)
