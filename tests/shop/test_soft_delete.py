import time

import pytest

from inventory.models import Reservation, Stock
from inventory.services import stock_adjust, stock_restock
from orders.services import order_cancel, order_place
from shop.errors import ProductUnavailable
from shop.models import ProductVariant
from tests.conftest import pay, stock_of

pytestmark = pytest.mark.django_db


def test_deleted_variant_vanishes_from_default_queryset_and_restore_brings_it_back(make_variant):
    variant = make_variant(sku="MUG")
    variant.delete()

    assert not ProductVariant.objects.filter(sku="MUG").exists()
    assert ProductVariant.all_objects.get(sku="MUG").is_deleted
    assert ProductVariant.all_objects.get(sku="MUG").deleted_at is not None

    variant.restore()
    assert ProductVariant.objects.get(sku="MUG").deleted_at is None


def test_bulk_delete_is_soft_and_hard_delete_is_explicit(make_variant):
    make_variant(sku="A1")
    make_variant(sku="A2")
    ProductVariant.objects.filter(sku__in=["A1", "A2"]).delete()
    assert ProductVariant.objects.count() == 0
    assert ProductVariant.all_objects.filter(is_deleted=True).count() == 2

    ProductVariant.all_objects.filter(sku="A1").restore()
    assert list(ProductVariant.objects.values_list("sku", flat=True)) == ["A1"]

    unsold = make_variant(sku="GONE", name="Gone", price="1.00")
    Stock.objects.filter(variant=unsold).delete()
    unsold.hard_delete()
    assert not ProductVariant.all_objects.filter(sku="GONE").exists()


def test_deleted_variant_cannot_be_ordered(make_variant, customer):
    variant = make_variant(sku="TEE", stock=5)
    variant.delete()
    with pytest.raises(ProductUnavailable) as error:
        order_place(customer=customer, items=[{"sku": "TEE", "quantity": 1}], idempotency_key="k1")
    assert error.value.code == "product_unavailable"
    assert stock_of(variant).reserved == 0


def test_updated_at_moves_on_every_service_update(make_variant, customer):
    variant = make_variant(sku="CAP", stock=5)
    stamps = [stock_of(variant).updated_at]

    def moved(*rows):
        time.sleep(0.002)
        for row in rows:
            row.refresh_from_db()
        current = [row.updated_at for row in rows]
        assert all(stamp > stamps[-1] for stamp in current), current
        stamps.append(max(current))

    stock_restock(sku="CAP", quantity=1, reason="delivery")
    moved(stock_of(variant))
    stock_adjust(sku="CAP", delta=-1, reason="broken")
    moved(stock_of(variant))
    paid = order_place(customer=customer, items=[{"sku": "CAP", "quantity": 1}], idempotency_key="k1")
    moved(stock_of(variant))
    pay(paid)  # status, commit of the reservation, stock counters
    moved(paid, stock_of(variant), Reservation.objects.get(order_line__order=paid))
    cancelled = order_place(customer=customer, items=[{"sku": "CAP", "quantity": 1}], idempotency_key="k2")
    moved(stock_of(variant))
    order_cancel(order=cancelled)  # status, release, counters
    moved(cancelled, stock_of(variant), Reservation.objects.get(order_line__order=cancelled))
