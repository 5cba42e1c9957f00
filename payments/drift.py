"""Where the books disagree: lines that break the unit rule, refunds that differ from their orders' and
lines' counts, payments whose provider's word the order does not book. ``reconcile`` and the tests read them."""

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db.models import (
    BooleanField,
    DecimalField,
    Exists,
    ExpressionWrapper,
    F,
    OuterRef,
    Q,
    Subquery,
    Sum,
    Value,
    prefetch_related_objects,
)
from django.db.models.functions import Coalesce, Greatest, Round

from inventory.models import StockMovement
from orders.models import Order, OrderLine
from orders.units import REFUND_RESTOCK
from payments.models import Payment, Refund, RefundLine


def order_line_list_units_broken(*, since: datetime | None = None) -> list[OrderLine]:
    """Lines that break the unit rule (``LineUnits.broken``), counting the units their refunds put back on
    hand by the ledger, or whose returned units differ from their returns' refunds made or under way; in id
    order, each with its ``problems`` (what ``reconcile`` prints).

    ``since`` as ``order_list_refund_drift`` (the lines of orders, or of refunds, changed since then). None:
    every line that can break it: with returned units or a restock (their counts within their CHECKs), or
    more shipped or refunded than ordered.
    """
    live_returns = Refund.objects.filter(source=Refund.Source.RETURN).exclude(state=Refund.State.FAILED)
    return_lines = RefundLine.objects.filter(refund__in=live_returns)
    restocks = StockMovement.objects.filter(reason=REFUND_RESTOCK)
    if since is None:
        scopes = [
            Q(quantity_returned__gt=0) | Q(quantity_shipped__gt=F("quantity")) | Q(quantity_refunded__gt=F("quantity")),
            Q(pk__in=restocks.filter(order_line__isnull=False).values("order_line")),
            Q(pk__in=return_lines.values("order_line")),
        ]
    else:
        refunds_changed = Refund.all_objects.filter(updated_at__gte=since).values("order")
        counted = (
            Q(quantity_refunded__gt=0) | Q(quantity_returned__gt=0) | Exists(restocks.filter(order_line=OuterRef("pk")))
        )
        scopes = [Q(order__updated_at__gte=since) & counted, Q(order__in=refunds_changed)]

    def summed(rows, field: str) -> Coalesce:
        per_line = rows.filter(order_line=OuterRef("pk")).values("order_line").annotate(sum=Sum(field))
        return Coalesce(Subquery(per_line.values("sum")), Value(0))

    broken = {}
    for scope in scopes:
        lines = OrderLine.objects.filter(scope).annotate(
            returns=summed(return_lines, "quantity"), restocked=summed(restocks, "on_hand_delta")
        )
        for line in lines.order_by():
            line.problems = line.units.broken(restocked=line.restocked)
            if line.returns != line.quantity_returned:
                line.problems.append(f"{line.quantity_returned} returned, their returns' refunds {line.returns}")
            if line.problems:
                broken[line.pk] = line
    found = sorted(broken.values(), key=lambda line: line.pk)
    prefetch_related_objects(found, "order", "variant")
    return found


def order_list_refund_drift(*, since: datetime | None = None) -> tuple[list[Order], list[OrderLine]]:
    """Orders whose refunded amount, and lines whose refunded units, differ from the refunds made or under
    way (not those the provider refused): each is claimed with its refund in one transaction, so any
    difference is drift for staff to look at. Both in id order.

    ``since`` (``orders.services.reconciling.reconcile_since``): only the orders changed since then, or
    whose refunds were, with all their lines; a refund moves its order's amount with its lines' units, so
    its drift shows there. Each is read by its ``updated_at`` index. None: every order and line with
    refunds (the tables whole, each in one pass).
    """
    if since is None:  # a refunded amount, else the refunds (an OR of the two would test every row's refunds)
        scopes = [
            (Q(amount_refunded__gt=0), Q(quantity_refunded__gt=0)),
            (Q(pk__in=Refund.objects.values("order")), Q(pk__in=RefundLine.objects.values("order_line"))),
        ]
    else:
        refunds_changed = Refund.all_objects.filter(updated_at__gte=since).values("order")
        scopes = [
            (Q(updated_at__gte=since), Q(order__updated_at__gte=since)),
            (Q(pk__in=refunds_changed), Q(order__in=refunds_changed)),
        ]
    live = Refund.objects.exclude(state=Refund.State.FAILED)
    amounts = live.filter(order=OuterRef("pk")).values("order").annotate(sum=Sum("amount")).values("sum")
    units = (
        RefundLine.objects.filter(order_line=OuterRef("pk"), refund__in=live)
        .values("order_line")
        .annotate(sum=Sum("quantity"))
        .values("sum")
    )
    orders, lines = {}, {}
    for order_scope, line_scope in scopes:
        drifted_orders = (
            Order.all_objects.filter(order_scope)
            .filter(Q(amount_refunded__gt=0) | Exists(Refund.objects.filter(order=OuterRef("pk"))))
            # Rounded to the cent: SQLite (bin/run) adds amounts as floats.
            .annotate(refunds_sum=Round(Coalesce(Subquery(amounts), Value(0), output_field=DecimalField()), 2))
            .exclude(amount_refunded=F("refunds_sum"))
            .order_by()
        )
        # No join here: MariaDB would start from the products and read every line through its index.
        drifted_lines = (
            OrderLine.objects.filter(line_scope)
            .filter(Q(quantity_refunded__gt=0) | Exists(RefundLine.objects.filter(order_line=OuterRef("pk"))))
            .annotate(refund_units=Coalesce(Subquery(units), Value(0)))
            .exclude(quantity_refunded=F("refund_units"))
            .order_by()
        )
        orders |= {order.pk: order for order in drifted_orders}
        lines |= {line.pk: line for line in drifted_lines}
    prefetch_related_objects(list(lines.values()), "order", "variant")
    return sorted(orders.values(), key=lambda order: order.pk), sorted(lines.values(), key=lambda line: line.pk)


@dataclass(frozen=True)
class PaymentRefundDrift:
    """A payment whose refunds, as its provider tells them, its order does not book (or books wrongly)."""

    payment: Payment
    refunded: Decimal  # what the provider says it refunded of the order's money (a charge's excess left out)
    booked: Decimal  # the refunds of it the order records as done
    under_way: Decimal  # the refunds of it asked of the provider and not yet answered

    def describe(self) -> str:
        payment = self.payment
        said = f"payment {payment.reference} of order {payment.order.number}: the provider refunded {self.refunded}"
        if payment.order.payment_reference != payment.reference:
            return f"{said} of a charge never applied ({payment.state}), whose order books {self.booked}"
        return f"{said}, the order books {self.booked} done and {self.under_way} under way"


def payment_list_refund_drift(*, since: datetime | None = None, order_ids=None) -> list[PaymentRefundDrift]:
    """Payments whose refunds the books do not explain, in id order: the one that paid its order, unless what
    the provider says it refunded of the order's money is at least the order's refunds done and at most those
    with the ones under way; a charge never applied, if the order records refunds of it, or it reads refunded
    while part of it is still charged. What it charged beyond its order's total (accepted from ``review``) is
    refunded on acceptance, so it is not the order's.

    ``since``: the payments changed since then, or whose order or refunds were (as ``order_list_refund_drift``);
    ``order_ids``: those orders' payments only. The property tests and ``reconcile`` read this.
    """
    payments = Payment.all_objects.filter(
        Q(amount_refunded__gt=0)
        | Q(state=Payment.State.REFUNDED)
        | Exists(Refund.objects.filter(payment=OuterRef("pk")))
    )
    if since is not None:
        payments = payments.filter(
            Q(updated_at__gte=since)
            | Q(order__updated_at__gte=since)
            | Q(pk__in=Refund.all_objects.filter(updated_at__gte=since).values("payment"))
        )
    if order_ids is not None:
        payments = payments.filter(order_id__in=list(order_ids))
    money = DecimalField(max_digits=12, decimal_places=2)

    def refunds_in(state: str):
        sums = Refund.objects.filter(payment=OuterRef("pk"), state=state).values("payment").annotate(sum=Sum("amount"))
        return Round(Coalesce(Subquery(sums.values("sum")), Value(Decimal(0)), output_field=money), 2)

    # ``Payment.charge`` and ``excess``. Sums rounded to the cent: SQLite (bin/run) adds amounts as floats.
    charge = Coalesce(F("charged_amount"), F("amount"), output_field=money)
    rows = payments.annotate(
        booked=refunds_in(Refund.State.SUCCEEDED),
        under_way=refunds_in(Refund.State.REQUESTED),
        paid_order=ExpressionWrapper(Q(order__payment_reference=F("reference")), output_field=BooleanField()),
        refunded=Round(
            ExpressionWrapper(
                F("amount_refunded") - Greatest(charge - F("amount"), Value(Decimal(0))), output_field=money
            ),
            2,
        ),
    ).filter(
        Q(paid_order=True, refunded__lt=F("booked"))
        | Q(paid_order=True, refunded__gt=Round(F("booked") + F("under_way"), 2))
        | Q(paid_order=False, booked__gt=0)
        | Q(paid_order=False, under_way__gt=0)
        | Q(paid_order=False, state=Payment.State.REFUNDED, amount_refunded__lt=charge)
    )
    found = []
    for row in rows.select_related("order").order_by("pk"):
        refunded = row.refunded if row.paid_order else row.amount_refunded
        found.append(PaymentRefundDrift(row, refunded, row.booked, row.under_way))
    return found
