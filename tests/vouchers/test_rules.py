"""The rules of one voucher on one order: pure functions, so tested without a database."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from vouchers.errors import VoucherInvalid
from vouchers.rules import VoucherTerms, voucher_check, voucher_line_discounts

NOON = datetime(2026, 11, 27, 12, tzinfo=UTC)


def _terms(kind="percentage", value="10", **fields) -> VoucherTerms:
    base = dict(
        pk=1,
        code="DROP20",
        kind=kind,
        value=Decimal(value),
        minimum_subtotal=None,
        starts_at=None,
        ends_at=None,
        usage_limit=None,
        limit_per_customer=None,
        eligible_variant_ids=None,
    )
    return VoucherTerms(**(base | fields))


def _reason(terms, *, now=NOON, uses=0, buyer_uses=0, lines=((1, Decimal("20.00")),)) -> str:
    try:
        voucher_check(terms, now=now, uses=uses, buyer_uses=buyer_uses, lines=list(lines))
    except VoucherInvalid as refusal:
        assert refusal.code == "voucher_invalid" and refusal.payload["voucher"] == "DROP20"
        return refusal.payload["reason"]
    return "applies"


@pytest.mark.parametrize(
    ("terms", "context", "reason"),
    [
        (_terms(), {}, "applies"),
        (_terms(starts_at=NOON + timedelta(seconds=1)), {}, "not_started"),
        (_terms(starts_at=NOON), {}, "applies"),  # in force from its start
        (_terms(ends_at=NOON), {}, "expired"),  # and no longer at its end
        (_terms(ends_at=NOON + timedelta(microseconds=1)), {}, "applies"),
        (_terms(usage_limit=100), {"uses": 100}, "used_up"),
        (_terms(usage_limit=100), {"uses": 99}, "applies"),
        (_terms(limit_per_customer=1), {"buyer_uses": 1}, "limit_per_customer"),
        (_terms(minimum_subtotal=Decimal("20.01")), {}, "minimum_not_met"),
        (_terms(minimum_subtotal=Decimal("20.00")), {}, "applies"),
        (_terms(eligible_variant_ids=frozenset({2})), {}, "not_applicable"),
        (_terms(eligible_variant_ids=frozenset({1})), {}, "applies"),
        (_terms("free_shipping", "0", eligible_variant_ids=frozenset({2})), {}, "applies"),
        # The first reason in order: a voucher that is both used up and expired is expired.
        (_terms(ends_at=NOON, usage_limit=1), {"uses": 1}, "expired"),
    ],
)
def test_each_reason_a_voucher_does_not_apply(terms, context, reason):
    assert _reason(terms, **context) == reason


def test_a_percentage_is_rounded_half_up_once_per_eligible_line():
    lines = [(1, Decimal("0.25")), (2, Decimal("10.05")), (3, Decimal("99.99"))]
    terms = _terms(value="10", eligible_variant_ids=frozenset({1, 2}))

    assert voucher_line_discounts(terms, lines, currency="EUR") == [Decimal("0.03"), Decimal("1.01"), Decimal("0")]


def test_a_fixed_amount_is_shared_in_proportion_and_adds_up_exactly():
    lines = [(1, Decimal("10.00")), (2, Decimal("10.00")), (3, Decimal("10.00"))]

    shares = voucher_line_discounts(_terms("fixed", "10.00"), lines, currency="EUR")

    assert shares == [Decimal("3.33"), Decimal("3.33"), Decimal("3.34")]
    assert sum(shares) == Decimal("10.00")


def test_a_fixed_amount_larger_than_the_eligible_lines_takes_them_to_zero_only():
    lines = [(1, Decimal("4.00")), (2, Decimal("50.00"))]
    terms = _terms("fixed", "20.00", eligible_variant_ids=frozenset({1}))

    assert voucher_line_discounts(terms, lines, currency="EUR") == [Decimal("4.00"), Decimal("0")]


def test_a_currency_without_minor_units_rounds_to_whole_units():
    assert voucher_line_discounts(_terms(value="15"), [(1, Decimal("1005"))], currency="JPY") == [Decimal("151")]


def test_free_shipping_takes_nothing_off_the_lines():
    assert voucher_line_discounts(_terms("free_shipping", "0"), [(1, Decimal("9.99"))], currency="EUR") == [0]
