"""The statement an order batch reads which of its SKUs sell only through a line (``orders.services``).

It rides in the lock holder's first round trip with the batch's other reads, as ``vouchers.sql`` does."""

from django.db import connection

from drops.models import Drop, DropVariant
from shop.models import ProductVariant

_DROP, _ENTRY, _VARIANT = Drop._meta.db_table, DropVariant._meta.db_table, ProductVariant._meta.db_table


def gated_skus_statement(*, skus) -> tuple[str, list]:
    """(sku, drop id) of the ``skus`` in a drop whose line is on: those sell to admitted buyers only."""
    skus = sorted(set(skus))
    q = connection.ops.quote_name
    sql = (
        f"SELECT v.{q('sku')}, d.{q('id')} FROM {q(_VARIANT)} v"
        f" JOIN {q(_ENTRY)} e ON e.{q('variant_id')} = v.{q('id')}"
        f" JOIN {q(_DROP)} d ON d.{q('id')} = e.{q('drop_id')}"
        f" WHERE d.{q('line_on')} AND NOT d.{q('is_deleted')} AND v.{q('sku')} IN ({', '.join(['%s'] * len(skus))})"
    )
    return sql, skus
