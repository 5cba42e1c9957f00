"""Checkout, the visitor's orders and cancelling one (an order's own page is ``fulfilment.views``').

Thin: a form, one service call, a page; refusals are shown as the errors explain themselves, and what
the session keeps is ``orders.checkout``'s business."""

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST
from rest_framework.exceptions import Throttled

from core.errors import DomainError
from core.pages import page_or_404
from core.throttling import voucher_check_start
from orders.checkout import CheckoutSession, connection_loss_refused
from orders.customers import buyer_of
from orders.errors import IdempotencyConflict
from orders.forms import CheckoutForm
from orders.selectors import (
    order_find_for_customer,
    order_last_shipping_address,
    order_list_for_visitor,
)
from orders.services import order_cancel, order_hold_checkout, order_place, order_quote
from orders.throttling import OrderThrottle
from shipping.errors import ShippingMethodUnavailable
from shipping.forms import AddressForm
from shipping.selectors import address_book_list
from shop.cart import cart_clear, cart_set
from shop.views import cart_lines
from vouchers.errors import VoucherInvalid
from vouchers.models import voucher_code_normal

ORDERS_PER_PAGE = 20  # "My orders" shows this many a page, newest first

UNCONFIRMED = "We could not confirm your order; submit again, it will not be placed twice."


def _order_throttled(request, *, retry_after: int, template: str = "orders/order_throttled.html"):
    response = render(request, template, {"retry_after": retry_after}, status=429)
    response["Retry-After"] = str(retry_after)
    return response


def checkout(request):
    """One page: the address (if anything is shipped), the method, the totals, then place the order.

    "Update totals" (or, with JavaScript, changing the country or method) shows the page again priced
    for what is chosen; "Place order" places it. Everything works without JavaScript."""
    visitor = CheckoutSession(request)
    if request.method == "POST" and (number := visitor.order_placed_by(request.POST.get("idempotency_key", ""))):
        return redirect("order-detail", number=number)  # a second submit of a page that already placed its order
    lines = cart_lines(request)
    if not lines:
        messages.info(request, "Your cart is empty.")
        return redirect("catalog")
    return checkout_page(request, visitor, lines)


def checkout_page(request, visitor: CheckoutSession, lines: list[dict], *, hold=None):
    """The checkout page of ``lines`` (``cart_lines``' shape); ``hold``: a drop's held order, whose lines
    they are, checked out with its units already held (``orders.hold_views``)."""
    data = request.POST if request.method == "POST" else None
    ships = any(line["product"].requires_shipping for line in lines)
    shipping_form = billing_form = None
    book = address_book_list(user=request.user) if ships and request.user.is_authenticated else []
    if ships:
        shipping_initial, billing_initial = _checkout_addresses(request, book, visitor)
        shipping_form = AddressForm(data, prefix="shipping", initial=shipping_initial)
        if data is None:
            billing_same = billing_initial is None or billing_initial == shipping_initial
        else:
            billing_same = bool(data.get("billing_same"))
        billing_form = None if billing_same else AddressForm(data, prefix="billing", initial=billing_initial or {})
    chosen = CheckoutForm(data)
    buyer = buyer_of(
        customer=request.user if request.user.is_authenticated else None, email=(data or {}).get("email", "")
    )
    try:  # a code tried here counts against the voucher throttle, as the API's do
        voucher_throttle = voucher_check_start(request, code=chosen.voucher_chosen())
    except Throttled as refusal:
        return _order_throttled(request, retry_after=refusal.wait, template="orders/voucher_throttled.html")
    quote, quote_error, voucher_error = _checkout_quote(
        lines, shipping_form, chosen.method_chosen(), voucher=chosen.voucher_chosen(), buyer=buyer
    )
    if voucher_throttle is not None and voucher_error is None:
        voucher_throttle.give_back()  # the code applies: not a guess
    form = CheckoutForm(data, offers=quote.shipping_offers if quote else ())
    unavailable = quote_error is not None and quote_error.code == "shipping_unavailable"
    if unavailable and shipping_form is not None and shipping_form.is_bound:
        shipping_form.add_error("country", quote_error.detail)  # beside the field the buyer chose
    elif quote_error is not None:
        messages.error(request, quote_error.explain())
    placing = data is not None and data.get("action") != "update"
    if voucher_error is not None:
        form.add_error("voucher", voucher_error.detail)
        placing = False
    elif placing and chosen.voucher_chosen() != voucher_code_normal(data.get("voucher_shown", "")):
        messages.info(request, "Your voucher is applied: check the new total, then place your order.")
        placing = False
    shortages, unconfirmed = {}, None
    address_forms = [f for f in (shipping_form, billing_form) if f is not None]
    if (
        placing
        and form.is_valid()
        and all([f.is_valid() for f in address_forms])
        and _checkout_submitted(request, form, visitor, email_known=hold is not None)
    ):
        key, email = form.cleaned_data["idempotency_key"], form.cleaned_data["email"]
        throttle = OrderThrottle(request, email=email)
        if not throttle.attempt():
            return _order_throttled(request, retry_after=throttle.wait())
        try:
            with connection_loss_refused("checkout"):
                order = _checkout_place(
                    hold,
                    customer=request.user if request.user.is_authenticated else None,
                    email=email or getattr(request.user, "email", ""),
                    items=[{"sku": line["product"].sku, "quantity": line["quantity"]} for line in lines],
                    idempotency_key=key,
                    client_address=throttle.client_address,
                    guest_orders=visitor.guest_orders,
                    shipping_address=shipping_form.cleaned_data if shipping_form else None,
                    billing_address=billing_form.cleaned_data if billing_form else None,
                    shipping_method=form.cleaned_data["shipping_method"] if ships else None,
                    voucher=chosen.voucher_chosen(),
                    given=form.given(),
                )
        except IdempotencyConflict as exc:
            # An earlier submit of this page placed an order (its outcome was unknown then) and the cart
            # has changed since: that order is this browser's; the cart as it is now is not placed.
            visitor.remember_order(key=key, number=exc.payload["number"])
            messages.error(request, exc.explain())
        except VoucherInvalid as exc:  # taken by other buyers since the page was shown, say
            form.add_error("voucher", exc.detail)
        except DomainError as exc:
            unconfirmed = key if exc.transient else None  # it may be placed already, or on the next submit
            messages.error(request, UNCONFIRMED if exc.transient else exc.explain())
            shortages = {line["sku"]: line["available"] for line in exc.payload.get("shortages", [])}
        else:
            if hold is None:
                cart_clear(request.session)
            visitor.remember_order(key=key, number=order.number)
            visitor.remember_address(order.shipping_address)
            return redirect("order-detail", number=order.number)
    email = form.cleaned_data.get("email", "") if unconfirmed else ""
    key = data.get("idempotency_key", "") if data is not None and not placing else None
    if not (key and visitor.issued(key) and not visitor.order_placed_by(key)):
        key = visitor.issue_key(unconfirmed=unconfirmed, email=email)
    method = quote.price.shipping_method.id if quote and quote.price and quote.price.shipping_method else None
    shown = quote.price.voucher_code if quote and quote.price else ""
    form = form.for_page(key=key, email=email, method=method, voucher_shown=shown, billing_same=billing_form is None)
    for line in lines:
        line["short"] = line["product"].sku in shortages
        line["left"] = shortages.get(line["product"].sku)
    context = {
        "form": form,
        "lines": lines,
        "ships": ships,
        "shipping_form": shipping_form,
        "billing_form": billing_form or AddressForm(prefix="billing"),
        "billing_same": billing_form is None,
        "price": quote.price if quote else None,
        "items_total": sum(line["total"] for line in lines),
        "needs_email": hold is None and (not request.user.is_authenticated or not request.user.email),
        "address_book": book,
        "hold": hold,
    }
    return render(request, "orders/checkout.html", context)


def _checkout_place(hold, **order):
    """Place the checkout's order, or check out the drop's ``hold`` with what the buyer gave."""
    if hold is None:
        return order_place(**order)
    return order_hold_checkout(
        order=hold,
        **{
            name: order[name] for name in ("shipping_address", "billing_address", "shipping_method", "voucher", "given")
        },
    )


def _checkout_addresses(request, book, visitor: CheckoutSession) -> tuple[dict, dict | None]:
    """The addresses checkout starts from: the book's entry picked (``?address=<id>``) or the default for
    shipping, else the last one used; and the default billing address, if the book keeps one."""
    picked = request.GET.get("address", "")
    chosen = next((entry.address for entry in book if str(entry.pk) == picked), None)
    default_shipping = next((entry.address for entry in book if entry.is_default_shipping), None)
    default_billing = next((entry.address for entry in book if entry.is_default_billing), None)
    if chosen or default_shipping:
        return chosen or default_shipping, default_billing
    last = order_last_shipping_address(customer=request.user) if request.user.is_authenticated else None
    return last or visitor.last_address or {}, default_billing


def _checkout_quote(lines, shipping_form, method: int | None, *, voucher: str, buyer: str | None):
    """The page's quote for the country, method and voucher on the form (the cheapest method, if the one
    chosen does not go there), the refusal to show if there is none (a country no zone covers, say),
    and the voucher's refusal, if any (the quote is then without it)."""
    country = shipping_form.country_chosen if shipping_form is not None else None
    items = [{"sku": line["product"].sku, "quantity": line["quantity"]} for line in lines]
    voucher_error = None
    for code in dict.fromkeys([voucher, ""]):
        try:
            try:
                quote = order_quote(
                    items=items, shipping_country=country, shipping_method=method, voucher=code, buyer=buyer
                )
            except ShippingMethodUnavailable:
                quote = order_quote(items=items, shipping_country=country, voucher=code, buyer=buyer)
            return quote, None, voucher_error
        except VoucherInvalid as refusal:
            voucher_error = refusal
        except DomainError as exc:
            return None, exc, voucher_error


def _checkout_submitted(request, form: CheckoutForm, visitor: CheckoutSession, *, email_known: bool) -> bool:
    """Whether the valid ``form`` may place an order: its key was issued to this browser, and a guest gave
    an email (the one its key was first submitted with, while its outcome is unknown)."""
    data = form.cleaned_data
    data["email"] = visitor.email_for(key=data["idempotency_key"], email=data["email"])
    if not visitor.issued(data["idempotency_key"]):
        messages.error(request, "This checkout page has expired; please check your order and place it again.")
        return False
    if email_known:  # a hold's order has its buyer already
        return True
    if not request.user.is_authenticated and not data["email"]:
        form.add_error("email", "Give an email address, or log in.")
        return False
    if request.user.is_authenticated and not request.user.email and not data["email"]:
        form.add_error("email", "Give an email address: your order's emails go there.")
        return False
    return True


@require_POST
def order_cancel_view(request, number: str):
    try:
        order_cancel(order=order_for_visitor(request, number))
        messages.success(request, "Order cancelled; its items are back on sale.")
    except DomainError as exc:
        messages.error(request, exc.explain())
    return redirect("order-detail", number=number)


def order_list(request):
    orders = order_list_for_visitor(
        customer=request.user if request.user.is_authenticated else None,
        guest_numbers=CheckoutSession(request).guest_orders,
    )
    page = page_or_404(orders, per_page=ORDERS_PER_PAGE, number=request.GET.get("page"))
    return render(request, "orders/order_list.html", {"orders": page, "page": page})


def order_own(request, number: str):
    """The visitor's own order, or None: their account's, or one this browser placed as a guest."""
    order = None
    if request.user.is_authenticated:
        order = order_find_for_customer(customer=request.user, number=number)
    if order is None and CheckoutSession(request).placed_here(number):
        order = order_find_for_customer(customer=None, number=number)
    return order


def order_for_visitor(request, number: str):
    """The visitor's own order, to act on; any other is as good as missing."""
    order = order_own(request, number)
    if order is None:
        raise Http404("No such order.")
    return order


@require_POST
def order_to_cart_view(request, number: str):
    """Put an order's lines back in the cart (after a declined payment, say), to change it and order again."""
    order = order_for_visitor(request, number)
    for line in order.lines_with_variants():
        cart_set(request.session, sku=line.variant.sku, quantity=line.quantity)
    messages.success(request, f"The items of order {order.number} are back in your cart.")
    return redirect("cart")
