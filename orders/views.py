"""Checkout and order pages. Thin: a form, one service call, a page; refusals are shown as the errors
explain themselves, and what the session keeps is ``orders.checkout``'s business."""

from django import forms
from django.contrib import messages
from django.contrib.auth.views import redirect_to_login
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_POST

from core.errors import DomainError
from orders.checkout import CheckoutSession, connection_loss_refused
from orders.errors import IdempotencyConflict, OrderLinkExpired
from orders.selectors import (
    order_find_by_number,
    order_find_for_customer,
    order_list_for_visitor,
    payment_find_in_progress,
    payment_find_refunded_late,
)
from orders.services import order_cancel, order_pay, order_place
from orders.services.emails import order_link_check
from orders.throttling import OrderThrottle
from shop.cart import cart_clear
from shop.views import cart_lines

UNCONFIRMED = "We could not confirm your order; submit again, it will not be placed twice."


class CheckoutForm(forms.Form):
    email = forms.EmailField(required=False, max_length=254)
    # One key per checkout page, kept while its order may have been placed (orders.checkout).
    idempotency_key = forms.CharField(widget=forms.HiddenInput, max_length=64)

    def for_page(self, *, key: str, email: str = "") -> "CheckoutForm":
        """The form the next page shows: with its key, and the email that key was submitted with (if kept)."""
        if not self.is_bound:
            return CheckoutForm(initial={"idempotency_key": key})
        self.data = self.data.copy()  # the errors found stay
        self.data["idempotency_key"] = key
        if email:
            self.data["email"] = email
        return self


def _order_throttled(request, *, retry_after: int):
    response = render(request, "orders/order_throttled.html", {"retry_after": retry_after}, status=429)
    response["Retry-After"] = str(retry_after)
    return response


def checkout(request):
    visitor = CheckoutSession(request)
    if request.method == "POST" and (number := visitor.order_placed_by(request.POST.get("idempotency_key", ""))):
        return redirect("order-detail", number=number)  # a second submit of a page that already placed its order
    lines = cart_lines(request)
    if not lines:
        messages.info(request, "Your cart is empty.")
        return redirect("catalog")
    form = CheckoutForm(request.POST if request.method == "POST" else None)
    shortages, unconfirmed = {}, None
    if form.is_valid() and _checkout_submitted(request, form, visitor):
        key, email = form.cleaned_data["idempotency_key"], form.cleaned_data["email"]
        throttle = OrderThrottle(request, email=email)
        if not throttle.attempt():
            return _order_throttled(request, retry_after=throttle.wait())
        try:
            with connection_loss_refused("checkout"):
                order = order_place(
                    customer=request.user if request.user.is_authenticated else None,
                    email=email or getattr(request.user, "email", ""),
                    items=[{"sku": line["product"].sku, "quantity": line["quantity"]} for line in lines],
                    idempotency_key=key,
                    client_address=throttle.client_address,
                    guest_orders=visitor.guest_orders,
                )
        except IdempotencyConflict as exc:
            # An earlier submit of this page placed an order (its outcome was unknown then) and the cart
            # has changed since: that order is this browser's; the cart as it is now is not placed.
            visitor.remember_order(key=key, number=exc.payload["number"])
            messages.error(request, exc.explain())
        except DomainError as exc:
            unconfirmed = key if exc.transient else None  # it may be placed already, or on the next submit
            messages.error(request, UNCONFIRMED if exc.transient else exc.explain())
            shortages = {line["sku"]: line["available"] for line in exc.payload.get("shortages", [])}
        else:
            cart_clear(request.session)
            visitor.remember_order(key=key, number=order.number)
            return redirect("order-detail", number=order.number)
    email = form.cleaned_data["email"] if unconfirmed else ""
    form = form.for_page(key=visitor.issue_key(unconfirmed=unconfirmed, email=email), email=email)
    for line in lines:
        line["short"] = line["product"].sku in shortages
        line["left"] = shortages.get(line["product"].sku)
    total = sum(line["total"] for line in lines)
    return render(request, "orders/checkout.html", {"form": form, "lines": lines, "total": total})


def _checkout_submitted(request, form: CheckoutForm, visitor: CheckoutSession) -> bool:
    """Whether the valid ``form`` may place an order: its key was issued to this browser, and a guest gave
    an email (the one its key was first submitted with, while its outcome is unknown)."""
    data = form.cleaned_data
    data["email"] = visitor.email_for(key=data["idempotency_key"], email=data["email"])
    if not visitor.issued(data["idempotency_key"]):
        messages.error(request, "This checkout page has expired; please check your order and place it again.")
        return False
    if not request.user.is_authenticated and not data["email"]:
        form.add_error("email", "Give an email address, or log in.")
        return False
    return True


def order_detail(request, number: str):
    order = _own_order(request, number)
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
    """The order page; ``own`` (the browser that placed it, or the account that owns it) may pay and cancel."""
    context = {
        "order": order,
        "own": own,
        "payment": payment_find_in_progress(order=order),
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
        messages.error(request, exc.explain())
        return redirect("order-detail", number=order.number)
    if payment.state != payment.State.PENDING:
        return redirect("order-detail", number=order.number)  # paid, or a charge being applied: nothing to pay
    return redirect(payment.redirect_url)


@require_POST
def order_cancel_view(request, number: str):
    try:
        order_cancel(order=_order_for(request, number))
        messages.success(request, "Order cancelled; its items are back on sale.")
    except DomainError as exc:
        messages.error(request, exc.explain())
    return redirect("order-detail", number=number)


def order_list(request):
    orders = order_list_for_visitor(
        customer=request.user if request.user.is_authenticated else None,
        guest_numbers=CheckoutSession(request).guest_orders,
    )
    return render(request, "orders/order_list.html", {"orders": orders})


def _own_order(request, number: str):
    """The visitor's own order, or None: their account's, or one this browser placed as a guest."""
    order = None
    if request.user.is_authenticated:
        order = order_find_for_customer(customer=request.user, number=number)
    if order is None and CheckoutSession(request).placed_here(number):
        order = order_find_for_customer(customer=None, number=number)
    return order


def _order_for(request, number: str):
    """The visitor's own order, to act on; any other is as good as missing."""
    order = _own_order(request, number)
    if order is None:
        raise Http404("No such order.")
    return order
