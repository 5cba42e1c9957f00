"""Catalog and cart pages. Thin: selectors read, shop.cart keeps the session cart."""

import math

from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from core.clock import db_now
from core.errors import InvalidQuantity
from shop.cart import cart_get, cart_line_change, cart_most, cart_set
from shop.selectors import product_find_for_catalog, product_list_for_catalog, product_names


def catalog(request):
    return render(request, "shop/catalog.html", {"products": product_list_for_catalog()})


def product_detail(request, sku: str):
    product = product_find_for_catalog(sku=sku)
    if product is None:
        raise Http404("No product for sale with this SKU.")
    # Counted down by the page from the server's (database's) clock, not the visitor's.
    opens_in = 0 if product.sale_open else max(1, math.ceil((product.sale_starts_at - db_now()).total_seconds()))
    return render(request, "shop/product.html", {"product": product, "most": cart_most(product), "opens_in": opens_in})


@require_POST
def cart_add_view(request, sku: str):
    product = product_find_for_catalog(sku=sku)
    if product is None:
        messages.error(request, f"{_name_of(sku)} is no longer for sale.")
        return redirect("catalog")
    if not product.sale_open:
        messages.error(request, f"The sale of {product.name} has not started yet.")
        return redirect("product", sku=product.sku)
    try:
        in_cart = cart_line_change(
            request.session, product=product, quantity=request.POST.get("quantity", ""), add=True
        )
    except InvalidQuantity as exc:
        messages.error(request, exc.explain())
        return redirect("product", sku=product.sku)
    messages.success(request, f"{product.name}: {in_cart} in your cart.")
    return redirect("cart")


def cart_view(request):
    lines = cart_lines(request)
    return render(request, "shop/cart.html", {"lines": lines, "total": sum(line["total"] for line in lines)})


@require_POST
def cart_update_view(request, sku: str):
    """Set a line's quantity; the remove button posts 0."""
    product = product_find_for_catalog(sku=sku)
    if product is None:
        cart_set(request.session, sku=sku, quantity=0)
        messages.warning(request, f"{_name_of(sku)} is no longer for sale and is not in your cart.")
        return redirect("cart")
    try:
        cart_line_change(request.session, product=product, quantity=request.POST.get("quantity", ""), add=False)
    except InvalidQuantity as exc:
        messages.error(request, exc.explain())
    return redirect("cart")


def cart_lines(request) -> list[dict]:
    """Cart lines with their products; products no longer for sale leave the cart, and the visitor is told."""
    cart = cart_get(request.session)
    products = {p.sku: p for p in product_list_for_catalog().filter(sku__in=list(cart))}
    gone = product_names(skus=[sku for sku in cart if sku not in products])
    lines = []
    for sku, quantity in sorted(cart.items()):
        product = products.get(sku)
        if product is None:
            cart_set(request.session, sku=sku, quantity=0)
            messages.warning(
                request, f"{gone.get(sku, 'An item')} is no longer for sale and was removed from your cart."
            )
        else:
            lines.append({"product": product, "quantity": quantity, "total": product.price_now * quantity})
    return lines


def _name_of(sku: str) -> str:
    """The name of the product ``sku`` names, in or out of the catalog; "An item" if none does."""
    return next(iter(product_names(skus=[sku]).values()), "An item")
