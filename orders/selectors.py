"""Reads of orders for sweeps and checks."""

from datetime import timedelta

from django.apps import apps
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

from core.clock import db_now
from core.collation import Exact
from inventory.models import Reservation
from orders.models import OPEN_STATUSES, PAID_STATUSES, Order, OrderLine
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
    is not expired, so a lock that is only busy never costs the buyer the stock they paid for.

    The one rule of an order that reads its payments: through the app registry, as Django reaches a model
    of an app above (``payments`` refers to orders; orders import nothing of it).
    """
    payment = apps.get_model("payments", "Payment")
    return Exists(payment.objects.filter(order=OuterRef("pk"), state=payment.State.CHARGED))


def order_list_overdue() -> QuerySet[Order]:
    """Unpaid orders past their reservation's expiry and not waiting for a charge to apply, oldest first."""
    overdue = Order.objects.filter(status__in=OPEN_STATUSES, expires_at__lte=Now())
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
            order__status__in=[*OPEN_STATUSES, *PAID_STATUSES],
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
    unpaid = Order.objects.filter(customer__isnull=True, status__in=OPEN_STATUSES)
    from_address = unpaid.filter(client_address=client_address).count() if client_address else 0
    from_browser = unpaid.filter(number__in=list(numbers)).count() if numbers else 0
    return max(from_address, from_browser)


def order_find_by_number(*, number: str) -> Order | None:
    """Any customer's order, for staff (and for an order link whose signature names it)."""
    return Order.objects.filter(number=number).prefetch_related(*AFTER_PAYMENT).first()


def order_last_shipping_address(*, customer) -> dict | None:
    """The address the customer's latest shipped order went to: offered at their next checkout."""
    return (
        Order.objects.filter(customer=customer, shipping_address__isnull=False)
        .order_by("-created_at", "-id")
        .values_list("shipping_address", flat=True)
        .first()
    )
