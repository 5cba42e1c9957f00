"""Reads of vouchers: their terms as an order sees them, and the uses that count against their limits."""

from collections import Counter, defaultdict
from collections.abc import Iterable
from datetime import datetime
from typing import NamedTuple

from django.db import connection, models
from django.db.models import Count, Q

from core.db import decimal_from_db, statements_run
from vouchers import sql
from vouchers.models import Voucher, VoucherUse, voucher_code_normal
from vouchers.rules import VoucherTerms

HOLDING = (VoucherUse.State.RESERVED, VoucherUse.State.COMMITTED)


class VoucherReads(NamedTuple):
    """What orders naming some vouchers need of them: their terms by code (the codes that exist and are not
    deleted), and the uses each (voucher id, buyer) holds."""

    terms: dict[str, VoucherTerms]
    buyer_uses: Counter


def vouchers_read_statements(
    *, codes: Iterable[str], skus: Iterable[str], buyers: Iterable[str] = (), lock: bool = False
) -> list[tuple[str, list]]:
    """The statements ``vouchers_read`` runs, for a caller that sends them with others (``statements_run``):
    the vouchers of ``codes`` (``lock``: ``SELECT ... FOR UPDATE``, inside a transaction, so their
    counters stay as read until it ends), the products and categories they are limited to, the uses
    ``buyers`` hold, and the product and category of each variant of ``skus``. Their rows go to
    ``vouchers_read_from_rows``."""
    codes = sorted({voucher_code_normal(code) for code in codes})
    return [
        sql.vouchers_statement(codes=codes, lock=lock),
        sql.voucher_products_statement(codes=codes),
        sql.voucher_categories_statement(codes=codes),
        sql.voucher_buyer_uses_statement(codes=codes, buyers=sorted(set(buyers))),
        sql.variant_categories_statement(skus=sorted(set(skus))),
    ]


def _from_db(field: models.Field, value):
    """A voucher column read by plain SQL as the ORM hands it over: money exact (``decimal_from_db``), times
    aware, the rest as its field makes it (a flag's 0 or 1 a bool)."""
    if value is None:
        return None
    if isinstance(field, models.DecimalField):
        return decimal_from_db(field, value)
    if isinstance(field, models.DateTimeField):
        return connection.ops.convert_datetimefield_value(value, None, connection)
    return field.to_python(value)


def vouchers_read_from_rows(vouchers, products, categories, uses, variants) -> VoucherReads:
    """``vouchers_read``'s answer from the rows its statements returned."""
    product_ids, paths = defaultdict(set), defaultdict(list)
    for voucher_id, product_id in products:
        product_ids[voucher_id].add(product_id)
    for voucher_id, path in categories:
        paths[voucher_id].append(path)
    terms = {}
    names = [*sql.TERMS_FIELDS, *sql.USES_COLUMNS]  # the row's columns, as ``sql.TERMS_COLUMNS`` names them
    for row in vouchers:
        read = dict(zip(names, row, strict=True))
        fields = {name: _from_db(field, read[name]) for name, field in sql.TERMS_FIELDS.items()}
        pk, eligible = fields["pk"], None
        if product_ids[pk] or paths[pk]:
            eligible = frozenset(
                variant_id
                for variant_id, product_id, path in variants
                if product_id in product_ids[pk] or any((path or "").startswith(prefix) for prefix in paths[pk])
            )
        held = sum(read[name] for name in sql.USES_COLUMNS)
        terms[fields["code"]] = VoucherTerms(**fields, eligible_variant_ids=eligible, uses=held)
    return VoucherReads(terms, Counter({(voucher_id, buyer): n for voucher_id, buyer, n in uses}))


def vouchers_read(
    *, codes: Iterable[str], skus: Iterable[str], buyers: Iterable[str] = (), lock: bool = False
) -> VoucherReads:
    """The vouchers of ``codes`` as orders of ``skus`` by ``buyers`` see them, in one round trip."""
    return vouchers_read_from_rows(
        *statements_run(connection.alias, vouchers_read_statements(codes=codes, skus=skus, buyers=buyers, lock=lock))
    )


def voucher_use_released(*, order_id: int) -> VoucherUse | None:
    """The order's released use (an expired order's), its voucher at hand; None if it holds none."""
    released = VoucherUse.objects.filter(order_id=order_id, state=VoucherUse.State.RELEASED)
    return released.select_related("voucher").first()


class VoucherBooksRow(NamedTuple):
    """A voucher's counters beside its uses ledger: they must agree."""

    code: str
    uses_reserved: int
    ledger_reserved: int
    uses_committed: int
    ledger_committed: int

    @property
    def drifted(self) -> bool:
        return (self.uses_reserved, self.uses_committed) != (self.ledger_reserved, self.ledger_committed)

    def describe(self) -> str:
        return (
            f"voucher {self.code}: uses reserved {self.uses_reserved} (ledger {self.ledger_reserved}), "
            f"committed {self.uses_committed} (ledger {self.ledger_committed})"
        )


def voucher_books(*, since: datetime | None = None) -> list[VoucherBooksRow]:
    """Vouchers' counters beside their ``VoucherUse`` rows counted by state, in code order.

    ``since``: only the vouchers changed since then (their counters move with every use), or with a use
    that was; each read by its ``updated_at`` index, a voucher's uses by ``voucher_use_by_buyer``. None:
    every voucher (the uses whole).
    """
    if since is None:
        scopes = [Q()]
    else:
        uses_changed = VoucherUse.all_objects.filter(updated_at__gte=since).values("voucher")
        scopes = [Q(updated_at__gte=since), Q(pk__in=uses_changed)]
    books = {}
    for scope in scopes:
        vouchers = Voucher.all_objects.filter(scope).annotate(
            ledger_reserved=Count("uses", filter=Q(uses__state=VoucherUse.State.RESERVED)),
            ledger_committed=Count("uses", filter=Q(uses__state=VoucherUse.State.COMMITTED)),
        )
        for v in vouchers.order_by():
            books[v.code] = VoucherBooksRow(
                v.code, v.uses_reserved, v.ledger_reserved, v.uses_committed, v.ledger_committed
            )
    return [books[code] for code in sorted(books)]
