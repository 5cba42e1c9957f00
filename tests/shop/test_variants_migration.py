"""The migration that makes every product a product with one variant, run on a database with orders,
reservations and a ledger: the books balance before and after, and every SKU's figures stay as they were."""

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from orders.services import order_cancel, order_place
from shop.models import Product, ProductVariant
from tests.conftest import pay

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE_VARIANTS = [
    ("shop", "0004_sale_price_window"),
    ("inventory", "0004_oversell_demo_goods_moved_to_demo"),
    ("orders", "0007_addresses_shipping_and_totals"),
]


def figures(*, units: str, unit_column: str) -> dict[str, tuple]:
    """Per SKU, read with plain SQL so that it works on either schema: its row, its counters, its ledger, its
    active reservations and what its order lines hold."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT u.sku, u.id, u.name, u.price, u.is_deleted, s.on_hand, s.reserved, s.version,"
            f" (SELECT COALESCE(SUM(m.on_hand_delta), 0) FROM inventory_stockmovement m WHERE m.stock_id = s.id),"
            f" (SELECT COALESCE(SUM(m.reserved_delta), 0) FROM inventory_stockmovement m WHERE m.stock_id = s.id),"
            f" (SELECT COALESCE(SUM(r.quantity), 0) FROM inventory_reservation r"
            f"  WHERE r.{unit_column} = u.id AND r.state = 'active'),"
            f" (SELECT COALESCE(SUM(l.quantity), 0) FROM orders_orderline l WHERE l.{unit_column} = u.id)"
            f" FROM {units} u JOIN inventory_stock s ON s.{unit_column} = u.id ORDER BY u.sku"
        )
        return {row[0]: row[1:] for row in cursor.fetchall()}


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


def test_every_sku_becomes_a_product_with_one_variant_and_keeps_its_figures(make_variant, capsys):
    mug = make_variant(sku="MUG", name="Logo mug", description="Stoneware, 350 ml.", stock=10)
    make_variant(sku="TEE", name="Black tee", stock=5)
    make_variant(sku="GONE", name="Gone cap", stock=2).delete()
    pay(order_place(email="a@example.com", items=[{"sku": "MUG", "quantity": 2}], idempotency_key="paid"))
    held = order_place(
        email="b@example.com",
        items=[{"sku": "MUG", "quantity": 1}, {"sku": "TEE", "quantity": 2}],
        idempotency_key="held",
    )
    order_cancel(order=order_place(email="c@example.com", items=[{"sku": "TEE", "quantity": 1}], idempotency_key="c"))
    call_command("reconcile")  # exits 1 on any drift
    now = figures(units="shop_productvariant", unit_column="variant_id")
    # The orders above are in the figures: MUG has 8 on hand, 1 reserved, as its ledger says, and 3 sold or held.
    assert (now["MUG"][4:6], now["MUG"][7:]) == ((8, 1), (8, 1, 1, 3))

    leaf = MigrationExecutor(connection).loader.graph.leaf_nodes()
    try:
        migrate(BEFORE_VARIANTS)
        before = figures(units="shop_product", unit_column="product_id")
        with connection.cursor() as cursor:
            cursor.execute("SELECT description FROM shop_product WHERE sku = 'MUG'")
            assert cursor.fetchone() == ("Stoneware, 350 ml.",)
    finally:
        migrate(leaf)

    after = figures(units="shop_productvariant", unit_column="variant_id")
    assert before == after == now
    for variant in ProductVariant.all_objects.select_related("product"):
        assert (variant.product.name, variant.product.is_deleted) == (variant.name, variant.is_deleted)
    assert Product.all_objects.count() == ProductVariant.all_objects.count() == 3
    assert ProductVariant.objects.get(sku="MUG").product.description == "Stoneware, 350 ml."
    assert mug.pk == ProductVariant.objects.get(sku="MUG").pk
    call_command("reconcile")
    pay(held)  # the order placed before the migration is paid after it
    call_command("reconcile")
    assert "3 stock(s) checked, 0 drifted" in capsys.readouterr().out
