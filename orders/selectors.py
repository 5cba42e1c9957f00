"""Reads of orders for sweeps and checks."""

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.conf import settings
from django.db.models import (
    BooleanField,
    DecimalField,
    Exists,
    ExpressionWrapper,
    F,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
    prefetch_related_objects,
)
from django.db.models.functions import Coalesce, Greatest, Now, Round
from django.utils import timezone

from core.clock import db_now
from core.collation import Exact
from inventory.models import Reservation, StockMovement
from orders.models import PAID_STATUSES, Order, OrderLine, Payment, Refund, RefundLine, ReturnLine, ReturnRequest
from orders.units import REFUND_RESTOCK
from vouchers.models import VoucherUse

# What the order pages and the API show of what happened after payment: shipments, refunds, returns.
AFTER_PAYMENT = [
    "shipments__lines__order_line__variant",
    "refunds__lines__order_line__variant",
    "returns__lines__order_line__variant",
    "returns__refund",
]

FINAL_STATUSES = [
    *PAID_STATUSES,
    Order.Status.CANCELLED,
    Order.Status.EXPIRED,
    Order.Status.PAYMENT_FAILED,
    Order.Status.REFUNDED,
]


def order_charge_waiting() -> Exists:
    """Whether an order has a charge taken and not yet applied (its stock lock was busy): such an order
    is not expired, so a lock that is only busy never costs the buyer the stock they paid for."""
    return Exists(Payment.objects.filter(order=OuterRef("pk"), state=Payment.State.CHARGED))


def order_list_overdue() -> QuerySet[Order]:
    """Unpaid orders past their reservation's expiry and not waiting for a charge to apply, oldest first."""
    overdue = Order.objects.filter(status=Order.Status.AWAITING_PAYMENT, expires_at__lte=Now())
    return overdue.exclude(order_charge_waiting()).order_by("pk")


def order_overdue_seconds() -> float:
    """How long the oldest overdue order has waited for the sweep to release it (0: none is waiting)."""
    oldest = order_list_overdue().aggregate(oldest=Min("expires_at"))["oldest"]
    return max((db_now() - oldest).total_seconds(), 0.0) if oldest else 0.0


def order_list_deletable() -> QuerySet[Order]:
    """Orders staff may delete: final ones not deleted yet.

    An order awaiting payment holds stock, and a deleted order is hidden from the sweeps that would
    release it, so a delete is one UPDATE filtered on this: a payment that revives an expired order after
    the admin looked makes it match nothing.
    """
    return Order.objects.filter(status__in=FINAL_STATUSES)


def _holding_stock(orders: QuerySet[Order]) -> Q:
    """Those of ``orders`` holding stock: active reservations, or a voucher's reserved use (held with the stock).

    Read from the active reservations and the reserved uses (few: the unpaid orders'), each by its state's
    index and joined to its order, never by reading the orders, which grow with history: one statement
    with an OR of the two would (MariaDB cannot start an OR of two semi-joins from their side). So the two
    reads are combined here, when the list is made, into the ids of the orders they name.
    """
    reserving = Reservation.objects.filter(state=Reservation.State.ACTIVE, order_line__order__in=orders).order_by()
    using = VoucherUse.objects.filter(state=VoucherUse.State.RESERVED, order__in=orders).order_by()
    ids = {*reserving.values_list("order_line__order", flat=True), *using.values_list("order", flat=True)}
    return Q(pk__in=sorted(ids))


def _past_release_grace(orders: QuerySet[Order]) -> QuerySet[Order]:
    """Drop failed payments whose release may still be queued (``order_fail_payment``).

    The failed-payments sweep retries such a release every EXPIRY_SWEEP_SECONDS, so one counts as
    stuck once two sweeps have passed. Every other final status releases or commits its stock in the
    transaction that sets it.
    """
    grace = db_now() - timedelta(seconds=2 * settings.EXPIRY_SWEEP_SECONDS)
    return orders.exclude(status=Order.Status.PAYMENT_FAILED, updated_at__gte=grace)


def order_list_final_holding_stock() -> QuerySet[Order]:
    """Orders that are paid, cancelled, expired or failed but still have active reservations (as of the call)."""
    final = Order.all_objects.filter(status__in=FINAL_STATUSES)
    return final.filter(_holding_stock(final)).order_by("pk")


def order_list_stuck_holding_stock() -> QuerySet[Order]:
    """Final orders, not deleted, holding stock that nothing already on its way will release: drift."""
    return _past_release_grace(order_list_final_holding_stock().filter(is_deleted=False))


def order_list_deleted_holding_stock() -> QuerySet[Order]:
    """Deleted orders holding stock, whatever their status: drift that no sweep releases.

    The sweeps load orders through ``Order.objects``, which hides deleted rows, and every status change
    is filtered the same way, so a deleted order awaiting payment keeps its stock for good (a payment
    refuses it as not found). A failed payment's queued release (which does find it) gets its grace.
    """
    deleted = Order.all_objects.filter(is_deleted=True)
    return _past_release_grace(deleted.filter(_holding_stock(deleted)).order_by("pk"))


def order_list_overdue_holding(*, skus) -> QuerySet[Order]:
    """Overdue unpaid orders with a line for any of ``skus``."""
    return order_list_overdue().filter(lines__variant__sku__in=list(skus)).distinct()


def order_list_for_customer(*, customer) -> QuerySet[Order]:
    """A customer's own orders, newest first, with lines, products and shipments loaded."""
    return (
        Order.objects.filter(customer=customer)
        .prefetch_related("lines__variant", *AFTER_PAYMENT)
        .order_by("-created_at", "-id")
    )


def order_find_for_customer(*, customer, number: str) -> Order | None:
    """The customer's order with this number; another customer's order is as good as missing."""
    return order_list_for_customer(customer=customer).filter(number=number).first()


def order_list_for_visitor(*, customer, guest_numbers) -> QuerySet[Order]:
    """A web visitor's orders, newest first: their account's (if logged in) and those this browser placed as
    a guest. An account's alone are read in the order of its index (``order_customer_newest``), so a page
    of them costs the same however many there are."""
    guest_numbers = list(guest_numbers)
    if customer is not None and not guest_numbers:
        mine = Q(customer=customer)
    else:
        mine = Q(customer=None, number__in=guest_numbers)
        if customer is not None:
            mine |= Q(customer=customer)
    return Order.objects.filter(mine).order_by("-created_at", "-id")


def payment_list_unsettled(*, older_than: timedelta) -> QuerySet:
    """Charges neither applied nor refunded (their payer died or lost the database) for ``older_than``."""
    return Payment.objects.filter(
        state__in=[Payment.State.CHARGED, Payment.State.REFUNDING], updated_at__lt=timezone.now() - older_than
    ).order_by("pk")[:500]


def order_units_held(*, buyers, variant_ids) -> dict[tuple[str, int], int]:
    """Units each buyer holds of each product across their unpaid and paid orders, by (buyer, product id).

    Read by the holder of the products' locks, which every order taking them waits for, so the sums
    stay true until it commits.
    """
    if not buyers or not variant_ids:
        return {}
    rows = (
        OrderLine.objects.annotate(buyer=Exact("order__buyer"))  # a look-alike email is another buyer
        .filter(
            order__buyer__in=sorted(buyers),
            buyer__in=sorted(buyers),
            order__status__in=[Order.Status.AWAITING_PAYMENT, *PAID_STATUSES],
            variant_id__in=sorted(variant_ids),
        )
        .order_by()
        .values_list("buyer", "variant_id")
        .annotate(units=Sum("quantity"))
    )
    return {(buyer, variant_id): units for buyer, variant_id, units in rows}


def order_count_open_guest(*, client_address: str = "", numbers=()) -> int:
    """A guest's unpaid orders: those placed from ``client_address``, or the most of ``numbers`` (a browser's)."""
    if not client_address and not numbers:
        return 0
    unpaid = Order.objects.filter(customer__isnull=True, status=Order.Status.AWAITING_PAYMENT)
    from_address = unpaid.filter(client_address=client_address).count() if client_address else 0
    from_browser = unpaid.filter(number__in=list(numbers)).count() if numbers else 0
    return max(from_address, from_browser)


def payment_find_in_progress(*, order: Order) -> Payment | None:
    """The order's payment that may still pay it: pending (the buyer may still be paying) or charged and
    about to be applied. While there is one, paying again returns it rather than starting another."""
    if order.status != Order.Status.AWAITING_PAYMENT:
        return None
    return order.payments.filter(state__in=[Payment.State.PENDING, Payment.State.CHARGED]).last()


def payment_find_in_review(*, order: Order) -> Payment | None:
    """The order's charge of another amount or currency than asked, waiting for staff: the order is not
    charged again meanwhile (``PaymentInReview``)."""
    return order.payments.filter(state=Payment.State.REVIEW).last()


def payment_find_refunded_late(*, order: Order) -> Payment | None:
    """A payment of the order that succeeded when the order could no longer be paid, and was refunded."""
    if order.status == Order.Status.REFUNDED:
        return None  # the order itself was refunded: said otherwise
    return order.payments.filter(state=Payment.State.REFUNDED).last()


def payment_find_by_reference(*, reference: str, provider: str) -> Payment | None:
    return Payment.objects.select_related("order").filter(reference=reference, provider=provider).first()


def order_find_by_number(*, number: str) -> Order | None:
    """Any customer's order, for staff (and for an order link whose signature names it)."""
    return Order.objects.filter(number=number).prefetch_related(*AFTER_PAYMENT).first()


def payment_find_for_outcome(*, provider: str, outcome) -> Payment | None:
    """The payment a provider's event is about: by its checkout, else by the metadata we gave the
    provider (order number and attempt), else by the provider's id of the money movement."""
    payments = Payment.objects.select_related("order").filter(provider=provider)
    if outcome.checkout:  # a checkout names its payment: never another payment of the same order
        return payments.filter(reference=outcome.checkout).first()
    if outcome.order_number and outcome.attempt is not None:
        if found := payments.filter(order__number=outcome.order_number, attempt=outcome.attempt).first():
            return found
    if outcome.provider_payment:
        return payments.filter(provider_payment=outcome.provider_payment).first()
    return None


def payment_list_checkouts_unpayable(*, order_id: int | None = None) -> QuerySet[Payment]:
    """Pending payments whose order can no longer be paid: cancelled, failed, paid or refunded, deleted, or
    expired past its payable window (EXPIRED_ORDER_PAYABLE_SECONDS). Oldest first, at most 500."""
    past_window = db_now() - timedelta(seconds=settings.EXPIRED_ORDER_PAYABLE_SECONDS)
    unpayable = (
        Q(
            order__status__in=[
                Order.Status.CANCELLED,
                Order.Status.PAYMENT_FAILED,
                *PAID_STATUSES,
                Order.Status.REFUNDED,
            ]
        )
        | Q(order__status=Order.Status.EXPIRED, order__expires_at__lt=past_window)
        | Q(order__is_deleted=True)
    )
    payments = Payment.objects.filter(unpayable, state=Payment.State.PENDING).select_related("order")
    if order_id is not None:
        payments = payments.filter(order_id=order_id)
    return payments.order_by("pk")[:500]


def order_last_shipping_address(*, customer) -> dict | None:
    """The address the customer's latest shipped order went to: offered at their next checkout."""
    return (
        Order.objects.filter(customer=customer, shipping_address__isnull=False)
        .order_by("-created_at", "-id")
        .values_list("shipping_address", flat=True)
        .first()
    )


def order_units_returnable(order: Order, *, lines: dict[str, OrderLine] | None = None) -> dict[str, int]:
    """Per SKU, the units the buyer may still ask to return: at the customer and not refunded
    (``LineUnits.returnable``), less those open returns ask back already."""
    if lines is None:
        lines = {line.variant.sku: line for line in order.lines.select_related("variant").order_by("pk")}
    open_requests = (
        ReturnLine.objects.filter(return_request__order=order, return_request__state=ReturnRequest.State.REQUESTED)
        .values("order_line")
        .annotate(units=Sum("quantity"))
    )
    asked = {row["order_line"]: row["units"] for row in open_requests}
    return {sku: max(0, line.units.returnable - asked.get(line.pk, 0)) for sku, line in lines.items()}


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


def return_find(*, pk: int) -> ReturnRequest | None:
    """A return with what its output shows (its order, lines and refund)."""
    return (
        ReturnRequest.objects.filter(pk=pk)
        .select_related("order", "refund")
        .prefetch_related("lines__order_line__variant")
        .first()
    )


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
