"""A voucher's window, on the database's clock: an order gets the discount only if its batch placed it
from the window's start and before its end, however orders and batches fall across the boundaries."""

import time
import uuid
from collections import Counter
from datetime import timedelta

import pytest
from django.conf import settings

from core.clock import db_now
from core.errors import DomainError
from orders.models import Order
from orders.services import order_place
from tests.conftest import assert_books_balance, assert_voucher_books
from tests.race import batch_sizes_recorded, run_parallel, wait_for_peers

pytestmark = pytest.mark.django_db(transaction=True)


def _buy_until(deadline: float, worker: int) -> Counter:
    """Place one-unit orders with the voucher back to back until ``deadline``; the answers, counted."""
    wait_for_peers()
    told = Counter()
    while time.monotonic() < deadline:
        try:
            order_place(
                email=f"buyer{worker}@example.com",
                items=[{"sku": "HOT", "quantity": 1}],
                idempotency_key=uuid.uuid4().hex,
                voucher="window",
            )
            told["placed"] += 1
        except DomainError as refusal:
            told[refusal.payload.get("reason", refusal.code)] += 1
    return told


def test_orders_across_the_start_and_end_of_a_voucher_get_it_only_inside_the_window(
    make_variant, make_voucher, monkeypatch, tmp_path
):
    hot = make_variant(sku="HOT", stock=100_000, price="20.00")
    now = db_now()
    starts, ends = now + timedelta(seconds=1), now + timedelta(seconds=2)
    voucher = make_voucher(code="WINDOW", value="25", starts_at=starts, ends_at=ends)
    sizes = batch_sizes_recorded(monkeypatch, "place", tmp_path / "sizes")
    deadline = time.monotonic() + 3.0

    told = sum(
        run_parallel(_buy_until, [{"deadline": deadline, "worker": n} for n in range(6)], processes=6, barrier=True),
        start=Counter(),
    )

    assert set(told) == {"placed", "not_started", "expired"}  # orders fell before, inside and after it
    ttl = timedelta(seconds=settings.RESERVATION_TTL_SECONDS)
    orders = list(Order.objects.all())
    assert len(orders) == told["placed"]
    for order in orders:
        placed_at = order.expires_at - ttl  # its batch's time, on the database's clock
        assert starts <= placed_at < ends, (placed_at, starts, ends)
        assert (order.voucher_code, order.discount, order.total) == ("WINDOW", 5, 15)
    assert max(sizes()) > 1  # placed in group-commit batches
    assert_books_balance(hot)
    assert_voucher_books(voucher)
