"""What the order tests share: a paid order to refund, and its lines' refunded units."""

import pytest

from orders.models import OrderLine
from orders.services import order_place
from tests.conftest import pay


@pytest.fixture
def paid(make_variant, provider):
    """A paid order of 3 mugs at 2.50 and 1 tee at 20.00: 27.50, prices including tax, nothing shipped,
    bought by ann@example.com (tests/orders/test_fulfilment.py has a ``paid`` of its own)."""
    mug = make_variant(sku="MUG", name="Logo mug", stock=10, price="2.50")
    tee = make_variant(sku="TEE", name="Black tee", stock=5, price="20.00")
    order = order_place(
        email="ann@example.com",
        items=[{"sku": "MUG", "quantity": 3}, {"sku": "TEE", "quantity": 1}],
        idempotency_key="k",
    )
    return {"order": pay(order), "mug": mug, "tee": tee}


def refunded_units(order) -> dict[str, int]:
    return dict(OrderLine.objects.filter(order=order).values_list("variant__sku", "quantity_refunded"))
