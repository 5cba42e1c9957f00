"""The hot path's plain-SQL helpers: ``statements_run`` sends several statements in one round trip;
``bulk_insert`` fills the defaults a row leaves out, or refuses naming the columns it cannot fill."""

from datetime import timedelta

import pytest
from django.core.exceptions import FieldDoesNotExist
from django.db import IntegrityError, connection, transaction
from django.db.models.signals import post_init
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from core.checks import database_returns_inserted_ids
from core.db import MissingColumns, bulk_insert, from_row, insert_returning, statements_run
from inventory.models import Stock
from orders.models import Order
from shipping.models import ShippingZone
from shop.models import Product, ProductVariant

pytestmark = pytest.mark.django_db(transaction=True)


def _variant_row(sku: str, product: Product) -> dict:
    return {"sku": sku, "name": sku.title(), "product_id": product.pk, "price": "3.00", "is_active": True}


def test_statements_sent_together_answer_each_with_its_rows_or_its_row_count(make_variant):
    mug, cup = make_variant(sku="MUG", stock=5), make_variant(sku="CUP", stock=5)
    insert, params, rows = insert_returning(ProductVariant, [_variant_row("BOWL", mug.product)])
    stocks = connection.ops.quote_name(Stock._meta.db_table)

    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        ids, updated, counted = statements_run(
            "default",
            [
                (insert, params),
                (f"UPDATE {stocks} SET on_hand = on_hand + 1 WHERE variant_id IN (%s, %s)", [mug.pk, cup.pk]),
                (f"SELECT COUNT(*) FROM {stocks} WHERE on_hand = %s", [6]),
            ],
        )

    assert len(queries) == 3  # BEGIN, the three statements in one round trip, COMMIT
    assert ids == ((ProductVariant.all_objects.get(sku="BOWL").pk,),) and rows[0]["sku"] == "BOWL"
    assert (updated, counted) == (2, ((2,),))


def test_an_error_stops_the_statements_after_it_and_is_raised(make_variant):
    mug = make_variant(sku="MUG", stock=5)
    insert, params, _ = insert_returning(ProductVariant, [_variant_row("MUG", mug.product)])
    stocks = connection.ops.quote_name(Stock._meta.db_table)

    with pytest.raises(IntegrityError):
        statements_run(
            "default",
            [
                (f"UPDATE {stocks} SET on_hand = 7 WHERE variant_id = %s", [mug.pk]),
                (insert, params),  # the SKU is taken
                (f"UPDATE {stocks} SET on_hand = 9 WHERE variant_id = %s", [mug.pk]),
            ],
        )

    assert Stock.objects.get(variant=mug).on_hand == 7  # autocommit: the first ran, the last never did
    assert ProductVariant.all_objects.filter(sku="MUG").count() == 1
    with connection.cursor() as cursor:  # and the connection is fit for the next statement
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)


def test_a_database_that_cannot_return_inserted_ids_fails_the_system_check(monkeypatch):
    assert database_returns_inserted_ids(databases=["default"]) == []

    monkeypatch.setattr(type(connection.features), "can_return_rows_from_bulk_insert", False)  # MySQL, not MariaDB

    assert [error.id for error in database_returns_inserted_ids(databases=["default"])] == ["core.E001"]


def _order_row(key: str) -> dict:
    """Only what an order must be given: every other field has a default, may be null or may be blank."""
    return {
        "buyer": f"email:{key}@example.com",
        "expires_at": timezone.now() + timedelta(minutes=15),
        "idempotency_key": key,
        "idempotency_key_hash": key,
        "idempotency_scope": f"email:{key}@example.com",
        "request_fingerprint": key,
        **{"currency": "EUR", "prices_include_tax": True, "subtotal": 0, "tax": 0, "total": 0},
    }


def test_fields_a_row_leaves_out_get_their_defaults():
    stored = bulk_insert(Order, [_order_row("first"), _order_row("second") | {"status": Order.Status.PAID.value}])

    first, second = (Order.all_objects.get(pk=row["id"]) for row in stored)
    assert (first.status, second.status) == (Order.Status.AWAITING_PAYMENT, Order.Status.PAID)  # a default; given
    assert (first.payment_reference, first.email, first.client_address) == ("", "", "")  # blank
    assert (first.paid_at, first.customer_id, first.sweep_lease_until) == (None, None, None)  # null
    assert (first.is_deleted, first.deleted_at) == (False, None)
    assert len({first.number, second.number}) == 2 and len(first.number) == 10  # a callable default: per row
    assert first.created_at == first.updated_at == second.created_at  # one instant per statement
    assert {key: stored[0][key] for key in ("number", "status", "paid_at")} == {
        "number": first.number,
        "status": "awaiting_payment",
        "paid_at": None,
    }  # the rows come back as stored


def test_a_row_missing_fields_without_defaults_is_refused_naming_them_before_any_sql():
    incomplete = {key: value for key, value in _order_row("k").items() if key not in ("buyer", "expires_at")}

    with CaptureQueriesContext(connection) as queries, pytest.raises(MissingColumns) as refused:
        bulk_insert(Order, [_order_row("complete"), incomplete])

    assert str(refused.value) == (
        "orders.Order rows leave out fields without a default: buyer, expires_at (row 1); give them in every row"
    )
    assert (refused.value.model, refused.value.fields) == (Order, ["buyer", "expires_at"])
    assert len(queries) == 0 and not Order.all_objects.exists()


def test_a_row_naming_no_column_is_refused_before_any_sql():
    with CaptureQueriesContext(connection) as queries, pytest.raises(FieldDoesNotExist, match=r"customer \(row 0\)"):
        bulk_insert(Order, [_order_row("k") | {"customer": None}])  # the attname is customer_id

    assert len(queries) == 0


def _fields(instance) -> dict:
    return {field.attname: getattr(instance, field.attname) for field in type(instance)._meta.concrete_fields}


def test_an_instance_from_a_row_is_the_one_the_database_loads():
    [stored] = bulk_insert(Order, [_order_row("from-row") | {"shipping_address": {"country": "DE"}}])

    built, loaded = from_row(Order, stored), Order.all_objects.get(pk=stored["id"])

    assert _fields(built) == _fields(loaded)
    assert (built._state.adding, built._state.db) == (False, loaded._state.db)
    built.email = "changed@example.com"
    built.save(update_fields=["email"])  # a saved row: an UPDATE, not a second INSERT
    assert Order.all_objects.get(pk=stored["id"]).email == "changed@example.com"


def test_fields_a_row_lacks_are_deferred_as_from_db_leaves_them():
    variant = ProductVariant.objects.create(
        product=Product.objects.create(name="Row"), sku="ROW-1", name="Row", price=3
    )

    built = from_row(ProductVariant, {"id": variant.pk, "sku": "ROW-1", "name": "Row"})

    assert built.get_deferred_fields() == {f.attname for f in ProductVariant._meta.concrete_fields} - {
        "id",
        "sku",
        "name",
    }
    assert built.price == 3  # read on first use, as any deferred field


def test_init_signal_receivers_still_see_instances_built_from_rows():
    seen = []

    def receiver(sender, instance, **kwargs):
        seen.append(instance)

    post_init.connect(receiver, sender=ProductVariant)
    try:
        built = from_row(ProductVariant, {"id": 1, "sku": "SIG-1", "name": "Signal"})
    finally:
        post_init.disconnect(receiver, sender=ProductVariant)
    assert seen == [built]


def test_a_field_that_converts_what_is_set_gets_the_value_converted():
    zone = ShippingZone.objects.create(name="Row zone", countries=["DE", "FR"])

    built = from_row(ShippingZone, {"id": zone.pk, "name": "Row zone", "countries": "DE,FR"})

    assert [country.code for country in built.countries] == ["DE", "FR"]
