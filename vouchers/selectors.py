"""Reads of vouchers: their terms as an order sees them, and the uses that count against their limits."""

from collections import Counter
from collections.abc import Iterable
from typing import NamedTuple

from django.db.models import Count, Q

from shop.models import ProductVariant
from vouchers.models import Voucher, VoucherUse, voucher_code_normal
from vouchers.rules import VoucherTerms

HOLDING = (VoucherUse.State.RESERVED, VoucherUse.State.COMMITTED)


def voucher_terms_map(*, codes: Iterable[str], skus: Iterable[str], lock: bool = False) -> dict[str, VoucherTerms]:
    """The vouchers named by ``codes`` (as typed) that exist and are not deleted, by normal code, each
    knowing which of the variants ``skus`` it takes money off. ``lock``: the voucher rows are read with
    ``SELECT ... FOR UPDATE`` (inside a transaction), so their counters stay as read until it ends."""
    vouchers = Voucher.objects.filter(code__in={voucher_code_normal(code) for code in codes}).order_by("pk")
    if lock:
        vouchers = vouchers.select_for_update()
    terms = {}
    for voucher in vouchers:
        terms[voucher.code] = VoucherTerms(
            voucher.pk,
            voucher.code,
            voucher.kind,
            voucher.value,
            voucher.minimum_subtotal,
            voucher.starts_at,
            voucher.ends_at,
            voucher.usage_limit,
            voucher.limit_per_customer,
            _eligible_variant_ids(voucher, skus=skus),
        )
    return terms


def _eligible_variant_ids(voucher: Voucher, *, skus: Iterable[str]) -> frozenset[int] | None:
    """The variants among ``skus`` whose product the voucher names or sits in one of its categories (or
    below); None when it names neither, so every variant."""
    product_ids = list(voucher.products.values_list("pk", flat=True))
    paths = list(voucher.categories.values_list("path", flat=True))
    if not product_ids and not paths:
        return None
    where = Q(product_id__in=product_ids)
    for path in paths:
        where |= Q(product__category__path__startswith=path)
    return frozenset(ProductVariant.all_objects.filter(where, sku__in=list(skus)).values_list("pk", flat=True))


def voucher_uses_held(*, voucher_ids: Iterable[int]) -> dict[int, int]:
    """Uses each voucher's orders hold (reserved and committed), from its counters."""
    return {
        pk: reserved + committed
        for pk, reserved, committed in Voucher.all_objects.filter(pk__in=list(voucher_ids)).values_list(
            "pk", "uses_reserved", "uses_committed"
        )
    }


def voucher_uses_by_buyer(*, voucher_ids: Iterable[int], buyers: Iterable[str]) -> Counter:
    """Uses held (reserved and committed) by each (voucher id, buyer)."""
    rows = (
        VoucherUse.objects.filter(voucher_id__in=list(voucher_ids), buyer__in=list(buyers), state__in=HOLDING)
        .values("voucher_id", "buyer")
        .annotate(uses=Count("id"))
    )
    return Counter({(row["voucher_id"], row["buyer"]): row["uses"] for row in rows})


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


def voucher_books() -> list[VoucherBooksRow]:
    """Every voucher with uses, its counters and its ``VoucherUse`` rows counted by state."""
    vouchers = Voucher.all_objects.annotate(
        ledger_reserved=Count("uses", filter=Q(uses__state=VoucherUse.State.RESERVED)),
        ledger_committed=Count("uses", filter=Q(uses__state=VoucherUse.State.COMMITTED)),
    ).order_by("code")
    return [
        VoucherBooksRow(v.code, v.uses_reserved, v.ledger_reserved, v.uses_committed, v.ledger_committed)
        for v in vouchers
    ]
