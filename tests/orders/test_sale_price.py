"""A sale price with a window: an order is charged the price in force when its batch placed it, on the
database's clock, however orders and batches fall across the sale's end; the pages show that price."""

import time
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.conf import settings

from core.clock import db_now
from orders import services
from orders.models import OrderLine
from shop.models import ProductVariant
from shop.selectors import VariantForSale, price_in_force
from tests.conftest import assert_books_balance
from tests.race import batch_sizes_recorded, run_parallel, wait_for_peers


def _sale(**window) -> VariantForSale:
    return VariantForSale(1, Decimal("20.00"), True, None, None, sale_price=Decimal("15.00"), **window)


def test_the_sale_price_is_in_force_from_its_start_and_before_its_end():
    noon = datetime(2026, 11, 27, 12, tzinfo=UTC)
    window = _sale(sale_price_from=noon, sale_price_until=noon + timedelta(hours=1))

    prices = [price_in_force(window, now=noon + timedelta(minutes=m)) for m in (-1, 0, 59, 60, 61)]

    assert prices == [Decimal("20.00"), Decimal("15.00"), Decimal("15.00"), Decimal("20.00"), Decimal("20.00")]
    assert price_in_force(_sale(), now=noon) == Decimal("15.00")  # no window: until removed
    no_sale = VariantForSale(1, Decimal("20.00"), True, None, None)
    assert price_in_force(no_sale, now=noon) == Decimal("20.00")


def _buy_until(deadline: float, worker: int) -> int:
    """Place one-unit orders back to back until ``deadline`` (this host's monotonic clock); how many."""
    wait_for_peers()
    placed = 0
    while time.monotonic() < deadline:
        services.order_place(
            email=f"buyer{worker}@example.com",
            items=[{"sku": "HOT", "quantity": 1}],
            idempotency_key=uuid.uuid4().hex,
        )
        placed += 1
    return placed


@pytest.mark.django_db(transaction=True)
def test_orders_across_the_end_of_a_sale_pay_the_price_in_force_when_their_batch_placed_them(
    make_variant, monkeypatch, tmp_path
):
    hot = make_variant(sku="HOT", stock=100_000, price="20.00")
    ends = db_now() + timedelta(seconds=1.5)
    ProductVariant.objects.filter(pk=hot.pk).update(sale_price=Decimal("15.00"), sale_price_until=ends)
    sizes = batch_sizes_recorded(monkeypatch, "place", tmp_path / "sizes")
    deadline = time.monotonic() + 3.0

    placed = run_parallel(
        _buy_until, [{"deadline": deadline, "worker": n} for n in range(6)], processes=6, barrier=True
    )

    ttl = timedelta(seconds=settings.RESERVATION_TTL_SECONDS)
    lines = list(OrderLine.objects.filter(variant=hot).select_related("order"))
    assert len(lines) == sum(placed)
    for line in lines:
        placed_at = line.order.expires_at - ttl  # the batch's time, on the database's clock
        in_force = Decimal("15.00") if placed_at < ends else Decimal("20.00")
        assert (line.unit_price, line.order.total) == (in_force, in_force), (placed_at, ends)
    charged = {line.unit_price for line in lines}
    assert charged == {Decimal("15.00"), Decimal("20.00")}  # orders fell on both sides of the end
    assert max(sizes()) > 1  # and they were placed in group-commit batches
    assert_books_balance(hot)


@pytest.mark.django_db
def test_the_pages_show_the_sale_price_and_when_it_ends(client, make_variant):
    mug = make_variant(sku="MUG", name="Logo mug", stock=5, price="12.50")
    ends = db_now() + timedelta(hours=2)
    ProductVariant.objects.filter(pk=mug.pk).update(sale_price=Decimal("9.99"), sale_price_until=ends)

    page = client.get("/products/MUG/").content.decode()
    assert "€9.99" in page and '<s class="was">€12.50</s>' in page and "Sale ends" in page
    assert ends.isoformat(timespec="seconds")[:16] in page  # the machine-readable end time

    client.post("/cart/add/MUG/", {"quantity": "2"})
    cart = client.get("/cart/").content.decode()
    assert "€19.98" in cart  # two at the sale price
