"""Checkout and order pages. Thin: they call orders.services and show refusals as messages."""

import logging
import uuid

from django import forms
from django.contrib import messages
from django.db import InterfaceError, OperationalError, connection
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from core.db import connection_lost
from core.errors import DomainError
from inventory.errors import InsufficientStock, LockTimeout, LockUnavailable
from orders.errors import IdempotencyConflict
from orders.selectors import (
    order_find_for_customer,
    order_list_for_visitor,
    payment_find_pending,
    payment_find_refunded_late,
)
from orders.services import order_cancel, order_pay, order_place
from orders.services.emails import order_link_check
from orders.throttling import OrderThrottle
from shop.cart import cart_clear
from shop.views import cart_lines

SESSION_ORDERS = "orders"  # numbers of the orders this browser placed as a guest
SESSION_CHECKOUT_KEYS = "checkout_keys"  # idempotency keys of checkout pages shown to this browser
# The email each key was submitted with while its outcome is unknown: a guest's key is scoped by email,
# so its next submit must use the same one to find (or place once) the order.
SESSION_UNCONFIRMED = "checkout_unconfirmed"
UNCONFIRMED = "We could not confirm your order; submit again, it will not be placed twice."

logger = logging.getLogger(__name__)


class CheckoutForm(forms.Form):
    email = forms.EmailField(required=False, max_length=254)
    # One key per checkout page, kept while its order may have been placed: submitting it twice places one order.
    idempotency_key = forms.CharField(widget=forms.HiddenInput, max_length=64)


def _order_throttled(request, *, retry_after: int):
    response = render(request, "orders/order_throttled.html", {"retry_after": retry_after}, status=429)
    response["Retry-After"] = str(retry_after)
    return response


def checkout(request):
    issued = request.session.get(SESSION_CHECKOUT_KEYS, {})  # key -> order number once placed
    if request.method == "POST":
        key = request.POST.get("idempotency_key", "")
        if issued.get(key):  # a second submit of a page that already placed its order
            return redirect("order-detail", number=issued[key])
    lines = cart_lines(request)
    if not lines:
        messages.info(request, "Your cart is empty.")
        return redirect("catalog")
    shortages = {}
    retry_key = None  # set when the order may have been placed: the page keeps its key
    form = CheckoutForm(request.POST if request.method == "POST" else None)
    unconfirmed = request.session.get(SESSION_UNCONFIRMED, {})
    if request.method == "POST" and form.is_valid():
        if form.cleaned_data["email"] and form.cleaned_data["idempotency_key"] in unconfirmed:
            form.cleaned_data["email"] = unconfirmed[form.cleaned_data["idempotency_key"]]
        if form.cleaned_data["idempotency_key"] not in issued:
            messages.error(request, "This checkout page has expired; please check your order and place it again.")
        elif not request.user.is_authenticated and not form.cleaned_data["email"]:
            form.add_error("email", "Give an email address, or log in.")
        else:
            throttle = OrderThrottle(request, email=form.cleaned_data["email"])
            if not throttle.attempt():
                return _order_throttled(request, retry_after=throttle.wait())
            try:
                order = order_place(
                    customer=request.user if request.user.is_authenticated else None,
                    email=form.cleaned_data["email"] or getattr(request.user, "email", ""),
                    items=[{"sku": line["product"].sku, "quantity": line["quantity"]} for line in lines],
                    idempotency_key=form.cleaned_data["idempotency_key"],
                    client_address=throttle.client_address,
                    guest_orders=request.session.get(SESSION_ORDERS, []),
                )
            except InsufficientStock as exc:
                shortages = {s["sku"]: s["available"] for s in exc.payload["shortages"]}
                messages.error(request, "Not enough stock for some lines; nothing was reserved.")
            except IdempotencyConflict as exc:
                # An earlier submit of this page placed an order (its outcome was unknown then) and the
                # cart has changed since: that order is this browser's; the cart as it is now is not placed.
                _remember(request, number=exc.payload["number"], key=form.cleaned_data["idempotency_key"])
                messages.error(
                    request,
                    f"Your earlier submit placed order {exc.payload['number']} before your cart changed; "
                    "nothing more was placed. Check that order under My orders before ordering again.",
                )
            except (LockTimeout, LockUnavailable):
                retry_key = form.cleaned_data["idempotency_key"]
                messages.error(request, UNCONFIRMED)
            except DomainError as exc:
                messages.error(request, _explain(exc))
            except (OperationalError, InterfaceError) as exc:
                if not connection_lost(exc):
                    raise
                logger.error("database connection lost during checkout: %s", exc)
                if not connection.is_usable():
                    connection.close()  # the session is saved after the view: on a new connection, not this one
                retry_key = form.cleaned_data["idempotency_key"]
                messages.error(request, UNCONFIRMED)
            else:
                cart_clear(request.session)
                _remember(request, number=order.number, key=form.cleaned_data["idempotency_key"])
                return redirect("order-detail", number=order.number)
    # After a definite refusal the page gets a fresh key: its next submit is a new request. After an
    # unknown outcome it keeps its key, so the next submit replays the first: that returns the order if
    # it was placed, and places it once if not.
    key = retry_key or uuid.uuid4().hex
    shown = request.session.get(SESSION_CHECKOUT_KEYS, {})  # with any order remembered above
    others = [(other, number) for other, number in shown.items() if other != key]
    request.session[SESSION_CHECKOUT_KEYS] = {**dict(others[-19:]), key: None}
    if retry_key and form.cleaned_data["email"]:
        request.session[SESSION_UNCONFIRMED] = {**unconfirmed, key: form.cleaned_data["email"]}
    if form.is_bound:
        form.data = form.data.copy()
        form.data["idempotency_key"] = key
        if retry_key and form.cleaned_data["email"]:
            form.data["email"] = form.cleaned_data["email"]
    else:
        form = CheckoutForm(initial={"idempotency_key": key})
    for line in lines:
        line["short"] = line["product"].sku in shortages
        line["left"] = shortages.get(line["product"].sku)
    total = sum(line["total"] for line in lines)
    return render(request, "orders/checkout.html", {"form": form, "lines": lines, "total": total})


def order_detail(request, number: str):
    if order_link_check(number=number, key=request.GET.get("key", "")):
        # The signed link of an order email: this browser may see the guest's order from now on.
        request.session[SESSION_ORDERS] = [*request.session.get(SESSION_ORDERS, []), number][-50:]
        return redirect("order-detail", number=number)
    order = _order_for(request, number)
    context = {
        "order": order,
        "payment": payment_find_pending(order=order),
        "refunded": payment_find_refunded_late(order=order),
    }
    return render(request, "orders/order.html", context)


@require_POST
def order_pay_view(request, number: str):
    """Send the buyer to the provider's page; its webhook tells the shop the outcome later."""
    order = _order_for(request, number)
    try:
        payment = order_pay(
            order=order, return_url=request.build_absolute_uri(reverse("order-detail", args=[order.number]))
        )
    except DomainError as exc:
        messages.error(request, _explain(exc))
        return redirect("order-detail", number=order.number)
    if payment.state == payment.State.CAPTURED:
        return redirect("order-detail", number=order.number)  # paid already: a late second click
    return redirect(payment.redirect_url)


@require_POST
def order_cancel_view(request, number: str):
    try:
        order_cancel(order=_order_for(request, number))
        messages.success(request, "Order cancelled; its items are back on sale.")
    except DomainError as exc:
        messages.error(request, exc.detail)
    return redirect("order-detail", number=number)


def order_list(request):
    orders = order_list_for_visitor(
        customer=request.user if request.user.is_authenticated else None,
        guest_numbers=request.session.get(SESSION_ORDERS, []),
    )
    return render(request, "orders/order_list.html", {"orders": orders})


def _remember(request, *, number: str, key: str) -> None:
    request.session[SESSION_CHECKOUT_KEYS] = {**request.session.get(SESSION_CHECKOUT_KEYS, {}), key: number}
    request.session.pop(SESSION_UNCONFIRMED, None)
    if not request.user.is_authenticated:
        request.session[SESSION_ORDERS] = [*request.session.get(SESSION_ORDERS, []), number][-50:]


def _explain(exc: DomainError) -> str:
    payload = exc.payload
    if exc.code == "limit_exceeded":
        return (
            f"You may hold at most {payload['limit']} of {payload['sku']} (you hold {payload['held']}); "
            f"you can order {payload['allowed']} more."
        )
    if exc.code == "sale_not_started":
        return f"The sale of {payload['sku']} opens at {payload['starts_at']}."
    skus = payload.get("skus")
    return f"{exc.detail} ({', '.join(skus)})" if skus else exc.detail


def _order_for(request, number: str):
    """The visitor's own order: their account's, or one this browser placed as a guest."""
    order = None
    if request.user.is_authenticated:
        order = order_find_for_customer(customer=request.user, number=number)
    if order is None and number in request.session.get(SESSION_ORDERS, []):
        order = order_find_for_customer(customer=None, number=number)
    if order is None:
        raise Http404("No such order.")
    return order
