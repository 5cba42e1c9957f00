"""The migration that counts returned units and restocked units per refund line, run on a database with a
return accepted and a refund restocked before it: the counts are filled from those refunds, and
``reconcile`` is clean before and after."""

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from fulfilment.services import Tracking, order_ship, return_request_accept, return_request_create
from orders.models import OrderLine
from orders.services import order_place
from payments.models import RefundLine
from payments.services import order_refund
from tests.conftest import pay

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE_LINE_UNITS = [("orders", "0016_payment_charged_amount")]


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)


def test_returned_and_restocked_units_are_filled_from_the_refunds_made(make_variant, provider, capsys):
    make_variant(sku="SNK", stock=10, price="50.00")
    order = pay(order_place(email="a@example.com", items=[{"sku": "SNK", "quantity": 3}], idempotency_key="s"))
    order_ship(order=order, tracking=Tracking(carrier="DHL"), quantities={"SNK": 2})
    return_request_accept(return_request=return_request_create(order=order, quantities={"SNK": 1}))
    order_refund(order=order, quantities={"SNK": 1}, restock=True)  # the one never shipped
    order_refund(order=order, quantities={"SNK": 1}, restock=False)  # the one kept
    call_command("reconcile")

    leaf = MigrationExecutor(connection).loader.graph.leaf_nodes()
    try:
        migrate(BEFORE_LINE_UNITS)
    finally:
        migrate(leaf)

    line = OrderLine.objects.get(order=order)
    assert (line.quantity_shipped, line.quantity_refunded, line.quantity_returned) == (2, 3, 1)
    assert list(RefundLine.objects.order_by("pk").values_list("quantity_restocked", flat=True)) == [1, 1, 0]
    call_command("reconcile", "--full")
    assert "Units: 0 order line(s) break the unit rule." in capsys.readouterr().out
