"""What a voucher's rules (``vouchers.rules``) are told of an order: gathered here for every order checked.

Placing (a batch, with the orders staged before each), the quote and a late payment's revival all read
and check a voucher through this module, so a rule needing a new fact of the order, or of its buyer's
other orders (which ``vouchers`` cannot see), has it read and handed over here, once for all three.
"""

from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import datetime
from decimal import Decimal

from django.db import connection

from core.db import statements_run
from vouchers.errors import VoucherInvalid
from vouchers.rules import VoucherTerms, voucher_check
from vouchers.selectors import VoucherReads, vouchers_read_from_rows, vouchers_read_statements


def order_voucher_statements(
    *, codes: Iterable[str], skus: Iterable[str], buyers: Iterable[str] = (), lock: bool = False
) -> list[tuple[str, list]]:
    """What ``order_voucher_check`` needs read of the vouchers of ``codes`` for orders of ``skus`` by
    ``buyers`` (``lock``: their rows FOR UPDATE), for a caller that sends it with other statements
    (``statements_run``); none if no code. Their rows go to ``order_voucher_reads_from_rows``."""
    codes = set(codes)
    return vouchers_read_statements(codes=codes, skus=skus, buyers=buyers, lock=lock) if codes else []


def order_voucher_reads_from_rows(*rows) -> VoucherReads:
    """``order_voucher_statements``' answer from their rows (no rows: no vouchers)."""
    return vouchers_read_from_rows(*rows) if rows else VoucherReads({}, Counter())


def order_voucher_read(
    *, codes: Iterable[str], skus: Iterable[str], buyers: Iterable[str] = (), lock: bool = False
) -> VoucherReads:
    """``order_voucher_statements`` run and read, in one round trip."""
    statements = order_voucher_statements(codes=codes, skus=skus, buyers=buyers, lock=lock)
    return order_voucher_reads_from_rows(*statements_run(connection.alias, statements))


def order_voucher_check(
    reads: VoucherReads,
    code: str,
    *,
    buyer: str | None,
    now: datetime,
    lines: list[tuple[int, Decimal]],
    staged: Sequence[tuple[str, VoucherTerms | None]] = (),
) -> VoucherTerms:
    """The voucher of ``code`` (as stored) if it applies to an order of ``lines`` (variant id, line total)
    by ``buyer`` at ``now`` (the database's clock), else ``VoucherInvalid`` with the reason.

    ``staged``: the orders placed before this one in its batch and not written yet, (buyer, voucher or
    None); the reads do not count them, so their uses are added here."""
    if (terms := reads.terms.get(code)) is None:  # no such code, or deleted
        raise VoucherInvalid(voucher=code, reason="unknown")
    users = [user for user, voucher in staged if voucher is not None and voucher.pk == terms.pk]
    voucher_check(
        terms,
        now=now,
        lines=lines,
        uses=terms.uses + len(users),
        buyer_uses=reads.buyer_uses[(terms.pk, buyer)] + users.count(buyer),
    )
    return terms
