"""Catalog and cart pages. Thin: selectors read, shop.cart keeps the session cart."""

import math
from pathlib import Path

from django import forms
from django.contrib import messages
from django.http import FileResponse, Http404
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST, require_safe

from core.clock import db_now
from core.errors import InvalidQuantity
from core.numbers import AmountField
from core.pages import page_or_404
from shop.cart import cart_get, cart_line_change, cart_most, cart_set
from shop.models import Category, OptionValue
from shop.selectors import (
    product_list_for_catalog,
    variant_find_for_catalog,
    variant_list_for_catalog,
    variant_names,
    variant_picker,
)

PRODUCTS_PER_PAGE = 24
FAVICON = Path(__file__).resolve().parent / "static" / "shop" / "favicon.ico"  # also at its static URL


class CatalogFilterForm(forms.Form):
    """The catalog's filters, from the query string; a value that is not valid is ignored."""

    q = forms.CharField(required=False, max_length=100, label="Search")
    in_stock = forms.BooleanField(required=False, label="In stock only")
    price_min = AmountField(required=False, label="From")
    price_max = AmountField(required=False, label="To")
    value = forms.ModelMultipleChoiceField(
        queryset=OptionValue.objects.select_related("option"), required=False, widget=forms.CheckboxSelectMultiple
    )
    sort = forms.ChoiceField(
        required=False,
        choices=[
            ("name", "Name"),
            ("price", "Price, low to high"),
            ("-price", "Price, high to low"),
            ("newest", "Newest"),
        ],
    )


def catalog(request):
    return _product_list(request, category=None)


def category_detail(request, slug: str):
    return _product_list(request, category=get_object_or_404(Category, slug=slug))


def _product_list(request, *, category):
    form = CatalogFilterForm(request.GET or None)
    form.is_valid()  # what is valid is in cleaned_data; an invalid value is left out, the others still apply
    filters = getattr(form, "cleaned_data", {})
    products = product_list_for_catalog(
        category=category,
        search=filters.get("q"),
        in_stock=True if filters.get("in_stock") else None,
        price_min=filters.get("price_min"),
        price_max=filters.get("price_max"),
        option_values=filters.get("value") or (),
        ordering=filters.get("sort") or "name",
    )
    page = page_or_404(products, per_page=PRODUCTS_PER_PAGE, number=request.GET.get("page"))
    query = request.GET.copy()
    query.pop("page", None)
    context = {
        "page": page,
        "products": page.object_list,
        "form": form,
        "query": query.urlencode(),
        "category": category,
        "breadcrumbs": Category.objects.get_ancestors(category) if category else [],
        "categories": (Category.objects.get_children(category) if category else Category.objects.get_root_nodes()),
    }
    return render(request, "shop/catalog.html", context)


def product_detail(request, sku: str):
    """A product's page, showing the variant ``sku`` names; the picker leads to its other variants."""
    variant = variant_find_for_catalog(sku=sku)
    if variant is None:
        raise Http404("No product for sale with this SKU.")
    siblings = list(variant_list_for_catalog(product_id=variant.product_id))
    product = variant.product
    images = sorted(product.images.all(), key=lambda image: (image.variant_id != variant.pk, image.position, image.pk))
    # Counted down by the page from the server's (database's) clock, not the visitor's.
    opens_in = 0 if variant.sale_open else max(1, math.ceil((variant.sale_starts_at - db_now()).total_seconds()))
    context = {
        "product": variant,
        "parent": product,
        "picker": variant_picker(variant, siblings),
        "images": [image for image in images if image.variant_id in (None, variant.pk)],
        "breadcrumbs": [*Category.objects.get_ancestors(product.category), product.category]
        if product.category
        else [],
        "most": cart_most(variant),
        "opens_in": opens_in,
    }
    return render(request, "shop/product.html", context)


@require_POST
def cart_add_view(request, sku: str):
    variant = variant_find_for_catalog(sku=sku)
    if variant is None:
        messages.error(request, f"{_name_of(sku)} is no longer for sale.")
        return redirect("catalog")
    if not variant.sale_open:
        messages.error(request, f"The sale of {variant.name} has not started yet.")
        return redirect("product", sku=variant.sku)
    try:
        in_cart = cart_line_change(
            request.session, variant=variant, quantity=request.POST.get("quantity", ""), add=True
        )
    except InvalidQuantity as exc:
        messages.error(request, exc.explain())
        return redirect("product", sku=variant.sku)
    messages.success(request, f"{variant.name}: {in_cart} in your cart.")
    return redirect("cart")


def cart_view(request):
    lines = cart_lines(request)
    return render(request, "shop/cart.html", {"lines": lines, "total": sum(line["total"] for line in lines)})


@require_POST
def cart_update_view(request, sku: str):
    """Set a line's quantity; the remove button posts 0."""
    variant = variant_find_for_catalog(sku=sku)
    if variant is None:
        cart_set(request.session, sku=sku, quantity=0)
        messages.warning(request, f"{_name_of(sku)} is no longer for sale and is not in your cart.")
        return redirect("cart")
    try:
        cart_line_change(request.session, variant=variant, quantity=request.POST.get("quantity", ""), add=False)
    except InvalidQuantity as exc:
        messages.error(request, exc.explain())
    return redirect("cart")


def cart_lines(request) -> list[dict]:
    """Cart lines with their products; products no longer for sale leave the cart, and the visitor is told."""
    cart = cart_get(request.session)
    variants = {p.sku: p for p in variant_list_for_catalog().filter(sku__in=list(cart))}
    gone = variant_names(skus=[sku for sku in cart if sku not in variants])
    lines = []
    for sku, quantity in sorted(cart.items()):
        variant = variants.get(sku)
        if variant is None:
            cart_set(request.session, sku=sku, quantity=0)
            messages.warning(
                request, f"{gone.get(sku, 'An item')} is no longer for sale and was removed from your cart."
            )
        else:
            lines.append({"product": variant, "quantity": quantity, "total": variant.price_now * quantity})
    return lines


def _name_of(sku: str) -> str:
    """The name of the product ``sku`` names, in or out of the catalog; "An item" if none does."""
    return next(iter(variant_names(skus=[sku]).values()), "An item")


@require_safe
def favicon(request):
    """The shop's icon at /favicon.ico, where browsers and probes look for it without a ``<link>``."""
    response = FileResponse(FAVICON.open("rb"), content_type="image/x-icon")
    response["Cache-Control"] = "public, max-age=86400"
    return response
