"""The hot path's plain-SQL helpers: ``statements_run`` sends several statements in one round trip."""

import pytest
from django.db import IntegrityError, connection, transaction
from django.test.utils import CaptureQueriesContext

from core.checks import database_returns_inserted_ids
from core.db import insert_returning, statements_run
from inventory.models import Stock
from shop.models import Product

pytestmark = pytest.mark.django_db(transaction=True)


def _product_row(sku: str) -> dict:
    return {"sku": sku, "name": sku.title(), "description": "", "price": "3.00", "is_active": True}


def test_statements_sent_together_answer_each_with_its_rows_or_its_row_count(make_product):
    mug, cup = make_product(sku="MUG", stock=5), make_product(sku="CUP", stock=5)
    insert, params, rows = insert_returning(Product, [_product_row("BOWL")])
    stocks = connection.ops.quote_name(Stock._meta.db_table)

    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        ids, updated, counted = statements_run(
            "default",
            [
                (insert, params),
                (f"UPDATE {stocks} SET on_hand = on_hand + 1 WHERE product_id IN (%s, %s)", [mug.pk, cup.pk]),
                (f"SELECT COUNT(*) FROM {stocks} WHERE on_hand = %s", [6]),
            ],
        )

    assert len(queries) == 3  # BEGIN, the three statements in one round trip, COMMIT
    assert ids == ((Product.all_objects.get(sku="BOWL").pk,),) and rows[0]["sku"] == "BOWL"
    assert (updated, counted) == (2, ((2,),))


def test_an_error_stops_the_statements_after_it_and_is_raised(make_product):
    mug = make_product(sku="MUG", stock=5)
    insert, params, _ = insert_returning(Product, [_product_row("MUG")])
    stocks = connection.ops.quote_name(Stock._meta.db_table)

    with pytest.raises(IntegrityError):
        statements_run(
            "default",
            [
                (f"UPDATE {stocks} SET on_hand = 7 WHERE product_id = %s", [mug.pk]),
                (insert, params),  # the SKU is taken
                (f"UPDATE {stocks} SET on_hand = 9 WHERE product_id = %s", [mug.pk]),
            ],
        )

    assert Stock.objects.get(product=mug).on_hand == 7  # autocommit: the first ran, the last never did
    assert Product.all_objects.filter(sku="MUG").count() == 1
    with connection.cursor() as cursor:  # and the connection is fit for the next statement
        cursor.execute("SELECT 1")
        assert cursor.fetchone() == (1,)


def test_a_database_that_cannot_return_inserted_ids_fails_the_system_check(monkeypatch):
    assert database_returns_inserted_ids(databases=["default"]) == []

    monkeypatch.setattr(type(connection.features), "can_return_rows_from_bulk_insert", False)  # MySQL, not MariaDB

    assert [error.id for error in database_returns_inserted_ids(databases=["default"])] == ["core.E001"]
