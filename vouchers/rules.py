"""The rules of one voucher on one order: whether it applies, and how much it takes off each line.

Pure functions of what they are given: the batch that places orders, and the quote, read the voucher,
its uses and the order's lines and hand them in (the same split as ``orders.pricing``).

Rounding (docs/design.md, "Totals"): a percentage is taken off each eligible line and rounded half up
to the currency's places once per line; a fixed amount (at most the eligible lines' total) is shared
among the eligible lines in proportion to their totals, each share rounded, the last line taking what
rounding left, so the shares add up to the amount exactly. Each line's tax is then computed on what is
left of it after its discount.
"""

from datetime import datetime
from decimal import Decimal
from typing import NamedTuple

from core.money import money_round
from vouchers.errors import VoucherInvalid

HUNDRED = Decimal(100)


class VoucherTerms(NamedTuple):
    """A voucher as an order sees it, with its uses counted when it was read.

    A field named as a ``Voucher`` field is read from that column (``vouchers.sql.TERMS_FIELDS``), by
    name: a new term is a field here and on the model, nothing else to line up."""

    pk: int
    code: str
    kind: str  # Voucher.Kind
    value: Decimal
    minimum_subtotal: Decimal | None
    starts_at: datetime | None
    ends_at: datetime | None
    usage_limit: int | None
    limit_per_customer: int | None
    # The variants it takes money off; None: every one.
    eligible_variant_ids: frozenset[int] | None
    uses: int = 0  # held by orders (reserved and committed) when it was read

    def eligible(self, variant_id: int) -> bool:
        return self.eligible_variant_ids is None or variant_id in self.eligible_variant_ids

    @property
    def free_shipping(self) -> bool:
        return self.kind == "free_shipping"


def voucher_check(terms: VoucherTerms, *, now: datetime, uses: int, buyer_uses: int, lines) -> None:
    """``VoucherInvalid`` with the first reason ``terms`` does not apply to an order of ``lines`` (variant
    id, line total) placed at ``now`` (the database's clock), with ``uses`` of the voucher held by all
    orders and ``buyer_uses`` by its buyer's."""
    if terms.starts_at is not None and now < terms.starts_at:
        raise VoucherInvalid(voucher=terms.code, reason="not_started")
    if terms.ends_at is not None and now >= terms.ends_at:
        raise VoucherInvalid(voucher=terms.code, reason="expired")
    if terms.usage_limit is not None and uses >= terms.usage_limit:
        raise VoucherInvalid(voucher=terms.code, reason="used_up")
    if terms.limit_per_customer is not None and buyer_uses >= terms.limit_per_customer:
        raise VoucherInvalid(voucher=terms.code, reason="limit_per_customer", limit=terms.limit_per_customer)
    subtotal = sum((line_total for _, line_total in lines), start=Decimal(0))
    if terms.minimum_subtotal is not None and subtotal < terms.minimum_subtotal:
        raise VoucherInvalid(voucher=terms.code, reason="minimum_not_met", minimum=str(terms.minimum_subtotal))
    if not terms.free_shipping and not any(terms.eligible(variant_id) for variant_id, _ in lines):
        raise VoucherInvalid(voucher=terms.code, reason="not_applicable")


def voucher_line_discounts(terms: VoucherTerms, lines, *, currency: str) -> list[Decimal]:
    """What ``terms`` takes off each of ``lines`` (variant id, line total), by the rounding rule above."""
    discounts = [Decimal(0)] * len(lines)
    eligible = [i for i, (variant_id, _) in enumerate(lines) if terms.eligible(variant_id)]
    if terms.kind == "percentage":
        for i in eligible:
            discounts[i] = money_round(lines[i][1] * terms.value / HUNDRED, currency)
    elif terms.kind == "fixed" and eligible:
        base = sum((lines[i][1] for i in eligible), start=Decimal(0))
        amount = min(terms.value, base)
        left = amount
        for i in eligible[:-1]:
            discounts[i] = min(money_round(amount * lines[i][1] / base, currency), left) if base else Decimal(0)
            left -= discounts[i]
        discounts[eligible[-1]] = min(left, lines[eligible[-1]][1])
    return discounts
