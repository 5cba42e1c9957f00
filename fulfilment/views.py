"""The order's page, which shows its whole life (payment, shipments, refunds, returns), and the buyer's
return request. Placing, listing and cancelling are ``orders.views``', paying ``payments.views``'."""

from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from core.errors import DomainError
from core.numbers import NumberInvalid, number_whole
from fulfilment.models import RETURN_WORDS_MAX_LENGTH
from fulfilment.selectors import order_units_returnable
from fulfilment.services import return_request_create
from orders.errors import OrderLinkExpired
from orders.links import order_link_check
from orders.models import PAID_STATUSES
from orders.selectors import order_find_by_number
from orders.views import order_for_visitor, order_own
from payments.selectors import payment_find_in_progress, payment_find_in_review, payment_find_refunded_late


def order_detail(request, number: str):
    order = order_own(request, number)
    if order is None and "key" in request.GET:
        return _order_by_link(request, number=number, key=request.GET["key"])
    if order is None:
        raise Http404("No such order.")
    return _order_page(request, order, own=True)


def _order_by_link(request, *, number: str, key: str):
    """The signed link of an order email, opened where the order is not the visitor's own: a guest's order
    is shown, with nothing to do on it; an account's order is shown once its owner logs in."""
    try:
        valid = order_link_check(number=number, key=key)
    except OrderLinkExpired as exc:
        return render(
            request, "orders/order_link_expired.html", {"number": number, "error": exc}, status=exc.status_code
        )
    order = order_find_by_number(number=number) if valid else None
    if order is None:
        raise Http404("No such order.")
    if order.customer_id is not None:
        return redirect_to_login(reverse("order-detail", args=[number]))
    return _order_page(request, order, own=False)


def _order_page(request, order, *, own: bool):
    """The order page; ``own`` (the browser that placed it, or the account that owns it) may pay, cancel
    and ask to return shipped units."""
    returnable = order_units_returnable(order) if own and order.status in PAID_STATUSES else {}
    context = {
        "order": order,
        "own": own,
        "payment": payment_find_in_progress(order=order),
        "in_review": payment_find_in_review(order=order),
        "refunded": payment_find_refunded_late(order=order),
        "returnable": [
            (line, returnable[line.variant.sku]) for line in order.lines.all() if returnable.get(line.variant.sku)
        ],
        "reason_max_length": RETURN_WORDS_MAX_LENGTH,
        "returns": order.returns.prefetch_related("lines__order_line__variant").select_related("refund"),
    }
    return render(request, "orders/order.html", context)


@require_POST
def order_return_view(request, number: str):
    """The buyer asks to return shipped units: ``units_<line id>`` per line, and a ``reason``."""
    order = order_for_visitor(request, number)
    quantities = {}
    for line in order.lines_with_variants():
        try:
            units = number_whole(request.POST.get(f"units_{line.pk}", "") or "0", high=line.quantity)
        except NumberInvalid as exc:
            messages.error(request, f"{line.variant.name}: {exc}")
            return redirect("order-detail", number=order.number)
        if units:
            quantities[line.variant.sku] = units
    try:
        return_request_create(order=order, quantities=quantities, reason=request.POST.get("reason", ""))
    except DomainError as exc:
        messages.error(request, exc.explain())
    else:
        messages.success(request, "Return requested: we email you once we have looked at it.")
    return redirect("order-detail", number=order.number)
