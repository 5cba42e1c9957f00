"""The migration to refunds by line, run on a database with an order refunded before it: the order gets
the refund of every line, its counts say so, and ``reconcile`` is clean before and after."""

from decimal import Decimal

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from orders.models import Order, OrderLine
from orders.services import order_place
from payments.models import Refund
from payments.services import order_refund
from tests.conftest import pay

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE_REFUNDS_BY_LINE = [("orders", "0010_shipments"), ("inventory", "0005_stock_keyed_by_variant")]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


def test_an_order_refunded_before_gets_the_refund_of_every_line(make_variant, provider, capsys):
    make_variant(sku="MUG", stock=10, price="2.50")
    refunded = pay(order_place(email="a@example.com", items=[{"sku": "MUG", "quantity": 2}], idempotency_key="r"))
    order_refund(order=refunded, restock=False)
    paid = pay(order_place(email="b@example.com", items=[{"sku": "MUG", "quantity": 1}], idempotency_key="p"))
    call_command("reconcile")

    leaf = MigrationExecutor(connection).loader.graph.leaf_nodes()
    try:
        migrate(BEFORE_REFUNDS_BY_LINE)
        with connection.cursor() as cursor:
            cursor.execute("SELECT status FROM orders_order WHERE id = %s", [refunded.pk])
            assert cursor.fetchone() == ("refunded",)
    finally:
        migrate(leaf)

    [refund] = Refund.objects.all()
    assert (refund.order_id, refund.amount, refund.state, refund.emailed_at is not None) == (
        refunded.pk, Decimal("5.00"), Refund.State.SUCCEEDED, True,
    )  # fmt: skip
    assert Order.objects.get(pk=refunded.pk).amount_refunded == Decimal("5.00")
    assert OrderLine.objects.get(order=refunded).quantity_refunded == 2
    assert Order.objects.get(pk=paid.pk).amount_refunded == 0
    call_command("reconcile")
    assert "Refunds: 0 order(s) and 0 line(s) drifted." in capsys.readouterr().out
