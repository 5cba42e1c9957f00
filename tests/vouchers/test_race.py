"""A flash crowd on a limited voucher: many processes race for its uses, on one hot SKU and on several,
and it is never redeemed more often than its limit."""

import uuid

import pytest

from core.errors import DomainError
from orders.models import Order
from orders.services import order_place
from tests.conftest import assert_books_balance, assert_voucher_books, pay
from tests.race import run_parallel, wait_for_peers
from vouchers.models import Voucher, VoucherUse

pytestmark = pytest.mark.django_db(transaction=True)

SKUS = ["HOT", "HOT", "HOT", "A", "B", "C"]  # half the crowd on one SKU (batched), half spread out


def _buyer(worker: int, orders: int) -> list[dict]:
    """Place ``orders`` one-unit orders with the voucher, each as a new guest; what each was told."""
    wait_for_peers()
    told = []
    for n in range(orders):
        email = f"buyer{worker}-{n}@example.com"
        try:
            order = order_place(
                email=email,
                items=[{"sku": SKUS[(worker + n) % len(SKUS)], "quantity": 1}],
                idempotency_key=uuid.uuid4().hex,
                voucher="drop100",
            )
            told.append({"email": email, "number": order.number, "discount": str(order.discount)})
        except DomainError as refusal:
            told.append({"email": email} | refusal.as_dict())
    return told


def test_a_100_use_voucher_raced_by_400_orders_from_8_processes_is_used_100_times(make_variant, make_voucher):
    variants = [make_variant(sku=sku, stock=1000, price="10.00") for sku in sorted(set(SKUS))]
    voucher = make_voucher(code="DROP100", value="20", usage_limit=100)

    answers = [
        answer
        for told in run_parallel(_buyer, [{"worker": w, "orders": 50} for w in range(8)], processes=8, barrier=True)
        for answer in told
    ]

    placed = [answer for answer in answers if "number" in answer]
    refused = [answer for answer in answers if "number" not in answer]
    assert len(answers) == 400
    assert len(placed) == 100  # every use taken, none twice
    assert {(answer["code"], answer["reason"]) for answer in refused} == {("voucher_invalid", "used_up")}
    # Every buyer told it got the discount has it, and nobody else has an order.
    assert {answer["discount"] for answer in placed} == {"2.00"}
    orders = {order.number: order for order in Order.objects.all()}
    assert set(orders) == {answer["number"] for answer in placed}
    assert all(order.voucher_code == "DROP100" and str(order.discount) == "2.00" for order in orders.values())
    assert VoucherUse.objects.filter(state="reserved").count() == 100
    assert_voucher_books(voucher)
    assert_books_balance(*variants)

    for number in sorted(orders)[:40]:  # paying commits the use, still never more than the limit
        pay(orders[number])
    voucher = Voucher.objects.get(pk=voucher.pk)
    assert (voucher.uses_reserved, voucher.uses_committed) == (60, 40)
    assert_voucher_books(voucher)
