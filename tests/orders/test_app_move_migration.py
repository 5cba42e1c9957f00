"""The move of payments and fulfilment out of ``orders`` (orders 0018, payments and fulfilment 0001), undone and
done again on a shop with orders paid, refunded, shipped and returned: every row of the moved tables, their
content types, and so staff permissions and admin history, survive both ways, and the books stay clean."""

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Permission
from django.contrib.contenttypes.models import ContentType
from django.core.management import call_command
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from fulfilment.services import Tracking, order_ship, return_request_accept, return_request_create
from orders.services import order_place
from payments.models import Payment, Refund
from payments.services import order_refund
from tests.conftest import pay

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE_THE_MOVE = [("orders", "0017_line_units"), ("payments", None), ("fulfilment", None)]
MOVED = {  # each moved model, by its name, and the app it moved to
    "payment": "payments",
    "paymentevent": "payments",
    "refund": "payments",
    "refundline": "payments",
    "shipment": "fulfilment",
    "shipmentline": "fulfilment",
    "returnrequest": "fulfilment",
    "returnline": "fulfilment",
}


def migrate(targets):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    ContentType.objects.clear_cache()  # its cache would still name the content types as they were


def rows(*, moved: bool) -> dict[str, list[tuple]]:
    """Every row of each moved model's table, whole, under the name of its app after the move or before."""
    found = {}
    with connection.cursor() as cursor:
        for model, app_label in MOVED.items():
            cursor.execute(f"SELECT * FROM {app_label if moved else 'orders'}_{model} ORDER BY id")
            found[model] = cursor.fetchall()
    return found


def content_types() -> dict[str, tuple[str, int]]:
    """The moved models' content types: the app each names, and its id (what permissions and log entries hold)."""
    kept = ContentType.objects.filter(app_label__in=["orders", "payments", "fulfilment"], model__in=list(MOVED))
    return {model: (app_label, pk) for model, app_label, pk in kept.values_list("model", "app_label", "pk")}


def placed(key: str, **units: int):
    """An order of ``units`` by SKU, placed as ``key``@example.com would."""
    items = [{"sku": sku, "quantity": quantity} for sku, quantity in units.items()]
    return order_place(email=f"{key}@example.com", items=items, idempotency_key=key)


def test_rows_content_types_and_permissions_survive_the_move_undone_and_done_again(
    make_variant, provider, staff_user, django_user_model, client
):
    staff_user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label__in=["payments", "fulfilment"], codename__startswith="view_")
    )
    make_variant(sku="MUG", stock=10, price="2.50")
    make_variant(sku="TEE", stock=5, price="20.00")
    pay(placed("paid", MUG=1))
    order_refund(order=pay(placed("refunded", MUG=2, TEE=1)), restock=True)
    shipped = pay(placed("shipped", TEE=2))
    order_ship(order=shipped, tracking=Tracking(carrier="DHL", number="JD0001"), actor=staff_user)
    returned = pay(placed("returned", MUG=3))
    order_ship(order=returned, tracking=Tracking(carrier="UPS"))
    asked = return_request_create(order=returned, quantities={"MUG": 2}, reason="Two too many")
    return_request_accept(return_request=asked, actor=staff_user)
    placed("waiting", TEE=1)  # not paid yet: its reservation holds a tee
    payment = Payment.objects.get(order=shipped)
    entry = LogEntry.objects.create(
        user=staff_user,
        content_type=ContentType.objects.get_for_model(Payment),
        object_id=str(payment.pk),
        object_repr=str(payment),
        action_flag=CHANGE,
    )
    assert set(Refund.objects.values_list("state", flat=True)) == {Refund.State.SUCCEEDED}
    call_command("reconcile", "--full")  # raises on any drift

    before = rows(moved=True)
    assert all(before.values()), {model: len(found) for model, found in before.items()}  # each table has rows
    moved_types = content_types()
    assert {model: app_label for model, (app_label, _) in moved_types.items()} == MOVED
    permissions = set(staff_user.user_permissions.values_list("pk", flat=True))

    leaf = MigrationExecutor(connection).loader.graph.leaf_nodes()
    try:
        migrate(BEFORE_THE_MOVE)
        tables = set(connection.introspection.table_names())
        assert not tables & {f"{app_label}_{model}" for model, app_label in MOVED.items()}
        assert rows(moved=False) == before
        assert content_types() == {model: ("orders", pk) for model, (_, pk) in moved_types.items()}
        staff = django_user_model.objects.get(pk=staff_user.pk)
        assert staff.has_perm("orders.view_payment") and staff.has_perm("orders.view_shipment")
        assert not staff.has_perm("payments.view_payment")
    finally:
        migrate(leaf)

    assert rows(moved=True) == before
    assert content_types() == moved_types
    staff = django_user_model.objects.get(pk=staff_user.pk)
    assert set(staff.user_permissions.values_list("pk", flat=True)) == permissions
    assert staff.has_perm("payments.view_payment") and staff.has_perm("fulfilment.view_shipment")
    assert LogEntry.objects.get(pk=entry.pk).get_edited_object() == payment
    client.force_login(staff)
    for page in [
        "/admin/payments/payment/",
        f"/admin/payments/payment/{payment.pk}/change/",
        "/admin/fulfilment/returnrequest/",  # shipments have no admin of their own
    ]:
        assert client.get(page).status_code == 200, page
    call_command("reconcile", "--full")
