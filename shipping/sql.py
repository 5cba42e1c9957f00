"""The shipping methods' statement in plain SQL, named, with the row it fills: it rides in a lock holder's
first round trip, where the ORM's compiling would cost more than the database's answer."""

from decimal import Decimal
from typing import NamedTuple

from django.db import connection

from shipping.models import ShippingMethod, ShippingZone


class ShippingOffer(NamedTuple):
    """A method as checkout sees it: where it goes, what it costs and for which weights."""

    id: int
    name: str
    price: Decimal
    free_above: Decimal | None
    min_weight_grams: int | None
    max_weight_grams: int | None
    countries: frozenset[str]


def shipping_methods_statement() -> tuple[str, list]:
    """Every active method of a live zone with the zone's countries, for ``statements_run``; its rows, in
    ``ShippingOffer``'s field order, go to ``shipping.selectors.shipping_methods_from_rows``. The tables are
    staff's few rows: read whole, filtered in Python."""
    quote = connection.ops.quote_name
    method, zone = quote(ShippingMethod._meta.db_table), quote(ShippingZone._meta.db_table)
    columns = ", ".join(f"{'z' if field == 'countries' else 'm'}.{field}" for field in ShippingOffer._fields)
    sql = (
        f"SELECT {columns} "
        f"FROM {method} m JOIN {zone} z ON z.id = m.zone_id "
        f"WHERE m.is_active AND NOT m.is_deleted AND NOT z.is_deleted"
    )
    return sql, []
