"""Reads of orders for sweeps and checks."""

from datetime import timedelta

from django.conf import settings
from django.db.models import (
    Exists,
    Min,
    OuterRef,
    Q,
    QuerySet,
    Sum,
)
from django.db.models.functions import Now
from django.utils import timezone

from core.clock import db_now
from core.collation import Exact
from inventory.models import Reservation
from orders.models import PAID_STATUSES, Order, OrderLine, Payment, ReturnLine, ReturnRequest
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


def return_find(*, pk: int) -> ReturnRequest | None:
    """A return with what its output shows (its order, lines and refund)."""
    return (
        ReturnRequest.objects.filter(pk=pk)
        .select_related("order", "refund")
        .prefetch_related("lines__order_line__variant")
        .first()
    )
