"""The rules of one voucher on one order: whether it applies, and how much it takes off each line.

Pure functions of what they are given (the same split as ``orders.pricing``): the voucher's terms, read
by ``vouchers.selectors``, and the order's facts (``VoucherOrder``), which ``orders.services.voucher_facts``
gathers for the batch that places orders, the quote and a late payment alike. A rule is one function in
``RULES``; docs/design.md, "A voucher rule", says what else a new one takes.

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


class VoucherOrder(NamedTuple):
    """What the rules know of the order a voucher is checked against (``orders.services.voucher_facts``
    gathers it for every caller). Each fact is required: a caller that lacks one fails, never skips a rule."""

    now: datetime  # the database's clock
    lines: list[tuple[int, Decimal]]  # (variant id, line total)
    uses: int  # of the voucher, held by all orders
    buyer_uses: int  # of the voucher, held by the buyer's orders


def _not_started(terms: VoucherTerms, order: VoucherOrder) -> None:
    if terms.starts_at is not None and order.now < terms.starts_at:
        raise VoucherInvalid(voucher=terms.code, reason="not_started")


def _expired(terms: VoucherTerms, order: VoucherOrder) -> None:
    if terms.ends_at is not None and order.now >= terms.ends_at:
        raise VoucherInvalid(voucher=terms.code, reason="expired")


def _used_up(terms: VoucherTerms, order: VoucherOrder) -> None:
    if terms.usage_limit is not None and order.uses >= terms.usage_limit:
        raise VoucherInvalid(voucher=terms.code, reason="used_up")


def _limit_per_customer(terms: VoucherTerms, order: VoucherOrder) -> None:
    if terms.limit_per_customer is not None and order.buyer_uses >= terms.limit_per_customer:
        raise VoucherInvalid(voucher=terms.code, reason="limit_per_customer", limit=terms.limit_per_customer)


def _minimum_not_met(terms: VoucherTerms, order: VoucherOrder) -> None:
    subtotal = sum((line_total for _, line_total in order.lines), start=Decimal(0))
    if terms.minimum_subtotal is not None and subtotal < terms.minimum_subtotal:
        raise VoucherInvalid(voucher=terms.code, reason="minimum_not_met", minimum=str(terms.minimum_subtotal))


def _not_applicable(terms: VoucherTerms, order: VoucherOrder) -> None:
    if not terms.free_shipping and not any(terms.eligible(variant_id) for variant_id, _ in order.lines):
        raise VoucherInvalid(voucher=terms.code, reason="not_applicable")


# Each raises its reason (``VoucherInvalid.REASONS``); an order is told the first, in this order.
RULES = (_not_started, _expired, _used_up, _limit_per_customer, _minimum_not_met, _not_applicable)


def voucher_check(terms: VoucherTerms, **order) -> None:
    """``VoucherInvalid`` with the first of ``RULES`` that refuses ``terms`` on an order of these facts
    (``VoucherOrder``'s, by name)."""
    facts = VoucherOrder(**order)
    for rule in RULES:
        rule(terms, facts)


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
