"""Moving a voucher's uses with its order: reserved when placed, committed when paid, given back.

Each move is a conditional UPDATE of the order's ``VoucherUse`` (so it happens once, whoever races it)
followed by the voucher's counters, guarded by the same condition and the table's CHECK constraints.
Callers run these inside the transaction that moves the order's stock.
"""

import logging
from collections import Counter

from django.db import transaction
from django.db.models import Count, F

from core.db import insert_returning
from vouchers import sql as voucher_sql
from vouchers.models import Voucher, VoucherUse

logger = logging.getLogger(__name__)

State = VoucherUse.State


class VoucherUsesBroken(Exception):
    """A voucher's counters disagree with its uses: the transaction rolls back, ``reconcile`` reports it."""


def voucher_uses_reserve_statements(uses: list[tuple[int, int, str, object]]) -> list[tuple[str, list]]:
    """The statements that reserve ``uses`` (voucher id, order id, buyer, discount): the ledger rows and one
    counter UPDATE per voucher, for a batch to send with its other rows. The counters' CHECK constraint
    refuses a use beyond the limit, whatever the caller read."""
    if not uses:
        return []
    sql, params, _ = insert_returning(
        VoucherUse,
        [
            {"voucher_id": voucher_id, "order_id": order_id, "buyer": buyer, "discount": discount}
            for voucher_id, order_id, buyer, discount in uses
        ],
    )
    counts = sorted(Counter(voucher_id for voucher_id, *_ in uses).items())
    return [(sql, params), *(voucher_sql.uses_reserved_add_statement(voucher_id=v, count=n) for v, n in counts)]


def voucher_use_commit(*, order_id: int) -> bool:
    """The order was paid: its reserved use counts for good. False if it held none."""
    return _voucher_use_move(order_id, State.RESERVED, State.COMMITTED)


def voucher_use_release(*, order_id: int, committed: bool = False) -> bool:
    """Give the order's reserved use back (``committed``: its committed one, for a refund). False if none."""
    return _voucher_use_move(order_id, State.COMMITTED if committed else State.RESERVED, State.RELEASED)


def _voucher_use_move(order_id: int, from_state: str, to_state: str) -> bool:
    use = VoucherUse.objects.filter(order_id=order_id, state=from_state).select_related("voucher").first()
    if use is None or not VoucherUse.objects.filter(pk=use.pk, state=from_state).update(state=to_state):
        return False
    source, target = f"uses_{from_state}", (f"uses_{to_state}" if to_state != State.RELEASED else None)
    counters = {source: F(source) - 1} | ({target: F(target) + 1} if target else {})
    if not Voucher.all_objects.filter(pk=use.voucher_id, **{f"{source}__gte": 1}).update(**counters):
        raise VoucherUsesBroken(f"voucher {use.voucher.code} counts no {from_state} use for order {order_id}")
    if to_state == State.RELEASED:
        logger.info("voucher %s: use of order %s released", use.voucher.code, order_id)
    return True


def voucher_use_reserve_again(use: VoucherUse) -> None:
    """Reserve a released use again, for its order's late payment. The caller checked that the voucher
    still applies, its row locked by that read (``lock``) until the transaction ends."""
    if VoucherUse.objects.filter(pk=use.pk, state=State.RELEASED).update(state=State.RESERVED):
        Voucher.all_objects.filter(pk=use.voucher_id).update(uses_reserved=F("uses_reserved") + 1)


def voucher_rebuild_from_ledger(*, code: str) -> None:
    """Set a voucher's counters to what its uses say (``reconcile --fix``), its row locked meanwhile."""
    with transaction.atomic():
        voucher = Voucher.all_objects.select_for_update().get(code=code)
        counts = dict(voucher.uses.values_list("state").annotate(n=Count("id")).order_by())
        reserved, committed = counts.get(State.RESERVED, 0), counts.get(State.COMMITTED, 0)
        Voucher.all_objects.filter(pk=voucher.pk).update(uses_reserved=reserved, uses_committed=committed)
    logger.warning(
        "voucher %s: counters rebuilt from its uses (reserved %d -> %d, committed %d -> %d)",
        code, voucher.uses_reserved, reserved, voucher.uses_committed, committed,
    )  # fmt: skip
