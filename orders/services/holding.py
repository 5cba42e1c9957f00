"""Admitting a drop's line: each admission is a hold, placed through the stock engine like any order.

``drop_line_pass`` is one pass of the runner (``manage.py drop_line``) over one drop: it reads the
drop's units, publishes its news, claims the heads of the line for the units free now
(``drops.line.line_claim``, at most ``DROP_ADMISSIONS_PER_SECOND``) and places a HELD order for each
(``order_place`` with ``hold_seconds``: the same lock, guard, ledger and reservation rows, the buyer's
``max_per_customer`` counted). The hold's idempotency key is the place's, so a claim a killed process
left half done is finished by the next pass with the same order, never a second one. A hold lapses with
the checkout window through the beat sweep, like any unpaid order; its units are free again and the
next pass gives them to the next buyer in line: the line's SKUs sell to no one else (``NotAdmitted``).
"""

import logging
from dataclasses import dataclass

from django.conf import settings
from django.contrib.auth import get_user_model

from core.clock import db_now
from core.errors import DomainError
from drops import line
from drops.models import Drop
from drops.rules import LineState, line_state, units_shown
from drops.selectors import drop_entries
from inventory.errors import InsufficientStock
from inventory.locks import lease
from inventory.models import Stock
from orders.models import Order
from orders.services.placing import order_place

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PassResult:
    state: str
    admitted: int
    back: int
    refused: int


def hold_key(*, drop_id: int, ticket: int) -> str:
    """The idempotency key of the hold a place gets: one order per place, however often it is tried."""
    return f"drop-{drop_id}-{ticket}"


# A pass takes well under a second; a runner that died frees its turn after this long.
PASS_LEASE_SECONDS = 10


def drop_line_pass(*, drop: Drop, rate_measured: float = 0.0) -> PassResult:
    """Publish the drop's news and admit the heads of its line for the units free now. One runner passes
    over a line at a time (a lease): what it read of the units stays true while it admits, so no later
    place is admitted before an earlier one. A runner that finds the turn taken skips the drop."""
    with lease(f"drop-line:{drop.pk}", seconds=PASS_LEASE_SECONDS) as turn:
        if not turn:
            return PassResult("busy", 0, 0, 0)
        return _line_pass(drop, rate_measured)


def _line_pass(drop: Drop, rate_measured: float) -> PassResult:
    entries = drop_entries(drop=drop)
    variant_ids = [entry.variant_id for entry in entries]
    units = {
        row["variant_id"]: (row["on_hand"] - row["reserved"], row["reserved"])
        for row in Stock.objects.filter(variant_id__in=variant_ids).values("variant_id", "on_hand", "reserved")
    }
    now = db_now()
    selling = {e.variant_id for e in entries if e.variant.sale_starts_at is None or e.variant.sale_starts_at <= now}
    free = {vid: max(0, units.get(vid, (0, 0))[0]) for vid in variant_ids}
    held = sum(units.get(vid, (0, 0))[1] for vid in variant_ids)
    state = line_state(opens_at=drop.line_opens_at, now=now, free=sum(free.values()), held=held, selling=bool(selling))
    variants = {
        str(e.variant_id): {"sku": e.variant.sku, "name": e.variant.name, "units": units_shown(free[e.variant_id])}
        for e in entries
    }
    major = {"state": state, "variants": variants}
    news = major | {
        "name": drop.name,
        "opens_at": drop.line_opens_at.isoformat(),
        "window": drop.checkout_window_seconds,
        "units_per_buyer": drop.units_per_buyer,
        # Measured over the runner's last seconds; until a first admission, the rate it will admit at.
        "rate": round(rate_measured or (settings.DROP_ADMISSIONS_PER_SECOND if selling else 0), 1),
    }
    line.news_publish(drop_id=drop.pk, news=news, major=major)
    if state not in (LineState.OPEN, LineState.SOLD_OUT):  # sold out: claims a dead runner left are finished
        return PassResult(state, 0, 0, 0)
    rate = settings.DROP_ADMISSIONS_PER_SECOND
    claims = line.line_claim(
        drop_id=drop.pk,
        free={vid: n for vid, n in free.items() if vid in selling and n > 0},
        rate=rate,
        burst=max(1, int(rate)),
    )
    skus = {e.variant_id: e.variant.sku for e in entries}
    counts = {"admitted": 0, "back": 0, "refused": 0}
    customers = get_user_model().objects.in_bulk({c.customer_id for c in claims if c.customer_id})
    for claim in claims:
        outcome = _hold_place(drop, claim, sku=skus.get(claim.variant_id), customer=customers.get(claim.customer_id))
        counts[outcome] += 1
    if claims:
        logger.info("drop %s: %s", drop.pk, counts)
    return PassResult(state, counts["admitted"], counts["back"], counts["refused"])


def _hold_place(drop: Drop, claim: line.Claim, *, sku: str | None, customer) -> str:
    """Place the hold of one claim and settle it: ``admitted``, ``back`` (no unit after all, or the engine
    was busy: the place waits at its own rank) or ``refused`` (the buyer may not have it: their limit)."""
    if sku is None:
        line.line_settle(drop_id=drop.pk, ticket=claim.ticket, outcome="refused", code="unknown_variant")
        return "refused"
    try:
        order = order_place(
            customer=customer,
            email="" if customer is not None else claim.email,
            items=[{"sku": sku, "quantity": claim.quantity}],
            idempotency_key=hold_key(drop_id=drop.pk, ticket=claim.ticket),
            hold_seconds=drop.checkout_window_seconds,
        )
    except InsufficientStock:
        line.line_settle(drop_id=drop.pk, ticket=claim.ticket, outcome="back")
        return "back"
    except DomainError as refusal:
        if refusal.transient:
            line.line_settle(drop_id=drop.pk, ticket=claim.ticket, outcome="back")
            return "back"
        line.line_settle(drop_id=drop.pk, ticket=claim.ticket, outcome="refused", code=refusal.code)
        return "refused"
    if claim.replay and order.status in (Order.Status.EXPIRED, Order.Status.CANCELLED):
        # Its first process placed the hold and died before telling the line, and the window lapsed since.
        line.line_settle(drop_id=drop.pk, ticket=claim.ticket, outcome="refused", code="hold_lapsed")
        return "refused"
    until_ms = int(order.expires_at.timestamp() * 1000)
    line.line_settle(drop_id=drop.pk, ticket=claim.ticket, outcome="admitted", order=order.number, until_ms=until_ms)
    return "admitted"
