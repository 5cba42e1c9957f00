"""Catalog and cart pages. Thin: selectors read, shop.cart keeps the session cart."""

import math

from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from core.clock import db_now
from shop.cart import cart_add, cart_get, cart_set
from shop.selectors import product_find_for_catalog, product_list_for_catalog


class QuantityForm(forms.Form):
    quantity = forms.IntegerField(min_value=0, max_value=settings.MAX_LINE_QUANTITY, initial=1)


def catalog(request):
    return render(request, "shop/catalog.html", {"products": product_list_for_catalog()})


def product_detail(request, sku: str):
    product = product_find_for_catalog(sku=sku)
    if product is None:
        raise Http404("No product for sale with this SKU.")
    # Counted down by the page from the server's (database's) clock, not the visitor's.
    opens_in = 0 if product.sale_open else max(1, math.ceil((product.sale_starts_at - db_now()).total_seconds()))
    return render(request, "shop/product.html", {"product": product, "form": QuantityForm(), "opens_in": opens_in})


@require_POST
def cart_add_view(request, sku: str):
    product = product_find_for_catalog(sku=sku)
    form = QuantityForm(request.POST)
    if product is None or not form.is_valid() or form.cleaned_data["quantity"] < 1:
        messages.error(request, "That could not be added to the cart.")
        return redirect("catalog")
    if not product.sale_open:
        messages.error(request, f"The sale of {product.name} has not started yet.")
        return redirect("product", sku=product.sku)
    cart_add(request.session, sku=product.sku, quantity=form.cleaned_data["quantity"])
    in_cart = cart_get(request.session)[product.sku]
    messages.success(request, f"{product.name}: {in_cart} in your cart.")
    return redirect("cart")


def cart_view(request):
    return render(request, "shop/cart.html", {"lines": cart_lines(request)})


@require_POST
def cart_update_view(request, sku: str):
    form = QuantityForm(request.POST)
    if form.is_valid() and sku in cart_get(request.session):
        cart_set(request.session, sku=sku, quantity=form.cleaned_data["quantity"])
    else:
        messages.error(request, f"Give a quantity from 0 to {settings.MAX_LINE_QUANTITY}.")
    return redirect("cart")


def cart_lines(request) -> list[dict]:
    """Cart lines with their products; products no longer for sale leave the cart, and the visitor is told."""
    cart = cart_get(request.session)
    products = {p.sku: p for p in product_list_for_catalog().filter(sku__in=list(cart))}
    lines = []
    for sku, quantity in sorted(cart.items()):
        product = products.get(sku)
        if product is None:
            cart_set(request.session, sku=sku, quantity=0)
            messages.warning(request, f"{sku} is no longer for sale and was removed from your cart.")
        else:
            lines.append({"product": product, "quantity": quantity, "total": product.price * quantity})
    return lines
