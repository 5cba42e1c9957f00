"""Money and rates read by plain SQL are the ``Decimal`` the ORM would read, whatever the driver hands back.

SQLite (bin/run's database) hands a decimal column back as a float: 9.90 as 9.9000000000000003552...,
which equals no stored 9.90, so a retried payment's totals never matched the order's (``order_expired``).
The rows below are what SQLite's driver returns for these statements.
"""

from decimal import Decimal

import pytest

from core.db import decimal_from_db
from shipping.models import ShippingMethod
from shipping.selectors import shipping_methods_from_rows
from shop.selectors import variants_for_sale_from_rows
from tax.selectors import tax_rates_from_rows
from vouchers import sql as voucher_sql
from vouchers.selectors import vouchers_read_from_rows


def exactly(value: Decimal, text: str) -> bool:
    return isinstance(value, Decimal) and str(value) == text


def test_a_shipping_price_read_from_sqlite_is_the_stored_amount():
    [method] = shipping_methods_from_rows([(1, "Standard", 9.9, 50.1, None, None, "DE,AT")])

    assert exactly(method.price, "9.90") and exactly(method.free_above, "50.10")


def test_a_tax_rate_read_from_sqlite_is_the_stored_rate():
    rates = tax_rates_from_rows([("DE", None, 19.1)])

    assert exactly(rates.rate(country="DE", tax_class_id=None), "19.100")


def test_a_voucher_read_from_sqlite_has_its_stored_value_and_minimum():
    read = {"pk": 1, "code": "DROP10", "kind": "percent", "value": 10.1, "minimum_subtotal": 20.3}
    read |= {"uses_reserved": 0, "uses_committed": 0}  # the other columns NULL
    row = tuple(read.get(name) for name in [*voucher_sql.TERMS_FIELDS, *voucher_sql.USES_COLUMNS])
    terms = vouchers_read_from_rows([row], [], [], [], []).terms["DROP10"]

    assert exactly(terms.value, "10.10") and exactly(terms.minimum_subtotal, "20.30")


def test_a_variant_price_read_from_sqlite_is_the_stored_price():
    row = ("MUG", 1, 12.3, 1, 0, None, None, "Mug", 1, 300, None, 9.9, None, None)
    variant = variants_for_sale_from_rows([row])["MUG"]

    assert exactly(variant.price, "12.30") and exactly(variant.sale_price, "9.90")


@pytest.mark.parametrize(("value", "text"), [(9.9, "9.90"), (Decimal("9.90"), "9.90"), (7, "7.00"), (None, "None")])
def test_decimal_from_db_gives_the_fields_places(value, text):
    assert str(decimal_from_db(ShippingMethod._meta.get_field("price"), value)) == text
