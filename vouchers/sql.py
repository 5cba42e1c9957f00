"""The statements a batch of orders reads its vouchers with, in plain SQL (``vouchers.selectors`` runs them).

They ride in the lock holder's first round trip, which every queued buyer waits for; compiled by the
ORM for each batch they cost more CPU than the database spends running them (as ``orders.sql`` says
of the orders' own statements).
"""

from django.core.exceptions import FieldDoesNotExist
from django.db import connection
from django.db.models import Field
from django.utils import timezone

from core.collation import binary_sql
from shop.models import Category, Product, ProductVariant
from vouchers.models import Voucher, VoucherUse
from vouchers.rules import VoucherTerms

_VOUCHER = Voucher._meta.db_table
_PRODUCTS = Voucher.products.through._meta.db_table
_CATEGORIES = Voucher.categories.through._meta.db_table
_USE = VoucherUse._meta.db_table
_HOLDING = (VoucherUse.State.RESERVED.value, VoucherUse.State.COMMITTED.value)


def _column_of(name: str) -> Field | None:
    """The voucher's column a terms field of this name is read from, if it names one."""
    try:
        field = Voucher._meta.pk if name == "pk" else Voucher._meta.get_field(name)
    except FieldDoesNotExist:
        return None
    return field if field in Voucher._meta.concrete_fields else None


# The terms read straight from the voucher's row, by the name they share with its fields, in the terms'
# order; then the counters ``uses`` adds up. The rest (``eligible_variant_ids``) is read beside it.
TERMS_FIELDS = {name: field for name in VoucherTerms._fields if (field := _column_of(name)) is not None}
USES_COLUMNS = ("uses_reserved", "uses_committed")
TERMS_COLUMNS = ", ".join([*(field.column for field in TERMS_FIELDS.values()), *USES_COLUMNS])


def _in(values) -> str:
    return ", ".join(["%s"] * len(values))


def vouchers_statement(*, codes: list[str], lock: bool) -> tuple[str, list]:
    """The vouchers of ``codes`` not deleted, in id order (``lock``: their rows FOR UPDATE; SQLite, which has
    no FOR UPDATE, locks the whole file for the writing transaction instead)."""
    sql = f"SELECT {TERMS_COLUMNS} FROM {_VOUCHER} WHERE code IN ({_in(codes)}) AND is_deleted = 0 ORDER BY id"
    return sql + (" FOR UPDATE" if lock and connection.features.has_select_for_update else ""), list(codes)


def uses_reserved_add_statement(*, voucher_id: int, count: int) -> tuple[str, list]:
    """Count ``count`` more reserved uses of the voucher (its CHECK refuses one beyond the limit). The time is
    a parameter: MariaDB's CURRENT_TIMESTAMP(6) is no SQLite function."""
    now = connection.ops.adapt_datetimefield_value(timezone.now())
    sql = f"UPDATE {_VOUCHER} SET uses_reserved = uses_reserved + %s, updated_at = %s WHERE id = %s"
    return sql, [count, now, voucher_id]


def voucher_products_statement(*, codes: list[str]) -> tuple[str, list]:
    """(voucher id, product id) of the products the vouchers of ``codes`` are limited to."""
    sql = (
        f"SELECT vp.voucher_id, vp.product_id FROM {_PRODUCTS} vp JOIN {_VOUCHER} v ON v.id = vp.voucher_id "
        f"WHERE v.code IN ({_in(codes)})"
    )
    return sql, list(codes)


def voucher_categories_statement(*, codes: list[str]) -> tuple[str, list]:
    """(voucher id, category path) of the categories the vouchers of ``codes`` are limited to."""
    sql = (
        f"SELECT vc.voucher_id, c.path FROM {_CATEGORIES} vc JOIN {_VOUCHER} v ON v.id = vc.voucher_id "
        f"JOIN {Category._meta.db_table} c ON c.id = vc.category_id WHERE v.code IN ({_in(codes)})"
    )
    return sql, list(codes)


def voucher_buyer_uses_statement(*, codes: list[str], buyers: list[str]) -> tuple[str, list]:
    """(voucher id, buyer, uses) held, reserved or committed, by ``buyers`` of the vouchers of ``codes``."""
    buyers = buyers or [""]
    # Buyers match and group exactly (a look-alike email is another buyer); the plain IN keeps the index.
    buyer = binary_sql("u.buyer", vendor=connection.vendor)
    sql = (
        f"SELECT u.voucher_id, {buyer}, COUNT(*) FROM {_USE} u JOIN {_VOUCHER} v ON v.id = u.voucher_id "
        f"WHERE v.code IN ({_in(codes)}) AND u.buyer IN ({_in(buyers)}) AND {buyer} IN ({_in(buyers)}) "
        f"AND u.state IN ({_in(_HOLDING)}) AND u.is_deleted = 0 GROUP BY u.voucher_id, {buyer}"
    )
    return sql, [*codes, *buyers, *buyers, *_HOLDING]


def variant_categories_statement(*, skus: list[str]) -> tuple[str, list]:
    """(variant id, product id, category path or None) of the variants of ``skus``."""
    sql = (
        f"SELECT pv.id, pv.product_id, c.path FROM {ProductVariant._meta.db_table} pv "
        f"JOIN {Product._meta.db_table} p ON p.id = pv.product_id "
        f"LEFT JOIN {Category._meta.db_table} c ON c.id = p.category_id WHERE pv.sku IN ({_in(skus)})"
    )
    return sql, list(skus)
