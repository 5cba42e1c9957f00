"""Catalog and cart pages. Thin: selectors read, shop.cart keeps the session cart."""

from django import forms
from django.conf import settings
from django.contrib import messages
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

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
    return render(request, "shop/product.html", {"product": product, "form": QuantityForm()})


@require_POST
def cart_add_view(request, sku: str):
    product = product_find_for_catalog(sku=sku)
    form = QuantityForm(request.POST)
    if product is None or not form.is_valid() or form.cleaned_data["quantity"] < 1:
        messages.error(request, "That could not be added to the cart.")
        return redirect("catalog")
    cart_add(request.session, sku=product.sku, quantity=form.cleaned_data["quantity"])
    messages.success(request, f"Added {form.cleaned_data['quantity']} x {product.name} to your cart.")
    return redirect(request.POST.get("next") or "cart")


def cart_view(request):
    return render(request, "shop/cart.html", {"lines": cart_lines(request.session)})


@require_POST
def cart_update_view(request, sku: str):
    form = QuantityForm(request.POST)
    if form.is_valid() and sku in cart_get(request.session):
        cart_set(request.session, sku=sku, quantity=form.cleaned_data["quantity"])
    return redirect("cart")


def cart_lines(session) -> list[dict]:
    """Cart lines with their products and what is available now (products no longer for sale drop out)."""
    products = {p.sku: p for p in product_list_for_catalog().filter(sku__in=list(cart_get(session)))}
    lines = []
    for sku, quantity in sorted(cart_get(session).items()):
        product = products.get(sku)
        if product is not None:
            lines.append({"product": product, "quantity": quantity, "total": product.price * quantity})
    return lines
