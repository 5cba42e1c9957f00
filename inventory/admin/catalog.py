"""The product and variant admins with their stock: a new variant's initial stock, variants made from
options, and one list of a product's variants' stock. Counters change only through ``inventory.services``."""

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import F
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html

from core.admin import NonAtomicChangeformMixin, ReadOnlyAdminMixin
from core.errors import DomainError
from core.numbers import AmountField, WholeNumberField
from inventory.admin.stock import STALE_MESSAGE, LowStockFilter
from inventory.errors import BelowReserved, StaleStock
from inventory.models import Stock
from inventory.services import stock_adjust, stock_restock
from inventory.variants import product_variants_generate, variant_create
from shop.admin import ProductAdmin, ProductVariantAddForm, ProductVariantAdmin
from shop.models import OptionValue, Product, ProductVariant


class VariantStockAddForm(ProductVariantAddForm):
    initial_stock = WholeNumberField(
        min_value=0,
        max_value=settings.MAX_STOCK_QUANTITY,
        initial=0,
        required=False,
        help_text="Units received now, recorded in the stock ledger as a restock.",
    )


class StockInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = Stock
    fields = readonly_fields = ["on_hand", "reserved", "available", "version", "updated_at", "set_on_hand"]

    @admin.display(description="")
    def set_on_hand(self, stock):
        return format_html('<a href="{}">Set on hand…</a>', reverse("admin:inventory_stock_change", args=[stock.pk]))


class VariantStockAdmin(NonAtomicChangeformMixin, ProductVariantAdmin):
    """The catalog's variant admin with the variant's stock: shown here, changed on its stock page.

    A variant is created with its Stock row (``variant_create``) and may receive its initial stock,
    through the stock service (hence no request-wide transaction).
    """

    list_display = ["sku", "name", "price", "is_active", "on_hand", "reserved", "available", "is_deleted"]
    list_filter = ["is_active", LowStockFilter]
    inlines = [StockInline]
    add_form = VariantStockAddForm
    add_fields = [*ProductVariantAdmin.add_fields, "initial_stock"]

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(
                on_hand_units=F("stock__on_hand"),
                reserved_units=F("stock__reserved"),
                available_units=F("stock__on_hand") - F("stock__reserved"),
            )
        )

    def get_inline_instances(self, request, obj=None):
        return super().get_inline_instances(request, obj) if obj else []

    def save_model(self, request, obj, form, change):
        if change:
            super().save_model(request, obj, form, change)
            return
        # variant_create also creates the Stock row every variant needs; the admin goes on with ``obj``.
        obj.pk = variant_create(
            product=form.cleaned_data["product"],
            sku=obj.sku,
            name=obj.name,
            price=obj.price,
            is_active=obj.is_active,
            max_per_customer=obj.max_per_customer,
            sale_starts_at=obj.sale_starts_at,
        ).pk
        obj.refresh_from_db()
        if quantity := form.cleaned_data["initial_stock"]:
            try:
                stock_restock(sku=obj.sku, quantity=quantity, reason="initial stock", actor=request.user)
            except DomainError as exc:  # the SKU was busy or Redis was down: the product exists, say so
                self.message_user(
                    request, f"{obj.sku} was created without its initial stock: {exc.as_text()}", messages.ERROR
                )

    def hard_delete_object(self, obj):
        """A product whose stock never moved takes its empty Stock row along; any ledger row keeps both."""
        Stock.objects.filter(variant=obj, movements__isnull=True).delete()
        super().hard_delete_object(obj)

    @admin.display(description="on hand", ordering="on_hand_units")
    def on_hand(self, variant):
        return variant.on_hand_units

    @admin.display(description="reserved", ordering="reserved_units")
    def reserved(self, variant):
        return variant.reserved_units

    @admin.display(description="available", ordering="available_units")
    def available(self, variant):
        return variant.available_units


class VariantsGenerateForm(forms.Form):
    values = forms.ModelMultipleChoiceField(
        queryset=OptionValue.objects.select_related("option"),
        widget=forms.CheckboxSelectMultiple,
        help_text="One variant is made for every combination: each size chosen with each colour chosen.",
    )
    price = AmountField()
    initial_stock = WholeNumberField(min_value=0, max_value=settings.MAX_STOCK_QUANTITY, initial=0)


class VariantStockRowForm(forms.Form):
    """One row of a product's stock list: the variant's new on-hand count, on the version it was shown at."""

    stock_id = WholeNumberField(widget=forms.HiddenInput)
    loaded_version = WholeNumberField(widget=forms.HiddenInput, min_value=0)
    new_on_hand = WholeNumberField(min_value=0, max_value=settings.MAX_STOCK_QUANTITY)


VariantStockFormSet = forms.formset_factory(VariantStockRowForm, extra=0)


class ProductStockAdmin(ProductAdmin):
    """The catalog's product admin with two pages of its own: make variants from options, and set the
    stock of all its variants in one list (each change a ledgered adjustment through the stock service)."""

    change_form_template = "admin/shop/product/change_form.html"

    def get_urls(self):
        own = [
            path(
                "<int:product_id>/variants/generate/",
                self.admin_site.admin_view(self.variants_generate_view),
                name="shop_product_variants_generate",
            ),
            path(
                "<int:product_id>/stock/",
                self.admin_site.admin_view(self.stock_list_view),
                name="shop_product_stock",
            ),
        ]
        return own + super().get_urls()

    def _product_for(self, request, product_id) -> Product:
        product = get_object_or_404(Product, pk=product_id)
        if not self.has_change_permission(request, product):
            raise PermissionDenied
        return product

    def variants_generate_view(self, request, product_id):
        product = self._product_for(request, product_id)
        form = VariantsGenerateForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            try:
                created = product_variants_generate(
                    product=product,
                    values=list(form.cleaned_data["values"]),
                    price=form.cleaned_data["price"],
                    initial_stock=form.cleaned_data["initial_stock"],
                    actor=request.user,
                )
            except (DomainError, ValidationError) as exc:
                form.add_error(None, exc.as_text() if isinstance(exc, DomainError) else exc)
            else:
                self.message_user(request, f"{len(created)} variants created: {', '.join(v.sku for v in created)}.")
                return redirect("admin:shop_product_stock", product_id=product.pk)
        context = {**self.admin_site.each_context(request), "opts": self.opts, "product": product, "form": form,
                   "title": f"Make variants of {product}"}  # fmt: skip
        return TemplateResponse(request, "admin/shop/product/variants_generate.html", context)

    def stock_list_view(self, request, product_id):
        product = self._product_for(request, product_id)
        variants = list(ProductVariant.objects.filter(product=product).select_related("stock").order_by("sku"))
        initial = [
            {"stock_id": v.stock.pk, "loaded_version": v.stock.version, "new_on_hand": v.stock.on_hand}
            for v in variants
        ]
        formset = VariantStockFormSet(request.POST or None, initial=initial)
        reason = request.POST.get("reason", "").strip()
        if request.method == "POST" and formset.is_valid() and len(formset.forms) != len(variants):
            messages.error(request, "The product's variants changed while this list was open: nothing was saved.")
            return redirect("admin:shop_product_stock", product_id=product.pk)
        if request.method == "POST" and formset.is_valid():
            if not reason and formset.has_changed():
                messages.error(request, "Say why the stock changes (stock take, delivery...): it goes in the ledger.")
            else:
                done, refused = self._stock_list_save(request, variants, formset, reason)
                for text in done:
                    self.message_user(request, text)
                for text in refused:
                    self.message_user(request, text, messages.ERROR)
                return redirect("admin:shop_product_stock", product_id=product.pk)
        rows = list(zip(variants, formset.forms, strict=True))
        for variant, row in rows:
            row.fields["new_on_hand"].widget.attrs["aria-label"] = f"On hand of {variant.sku}"
        context = {**self.admin_site.each_context(request), "opts": self.opts, "product": product,
                   "formset": formset, "rows": rows, "reason": reason, "title": f"Stock of {product}"}  # fmt: skip
        return TemplateResponse(request, "admin/shop/product/stock_list.html", context)

    def _stock_list_save(self, request, variants, formset, reason):
        """Each changed row is its own adjustment: one refused (stale, below reserved) leaves the others."""
        done, refused = [], []
        by_stock = {v.stock.pk: v for v in variants}
        for row in formset.forms:
            if not row.has_changed():
                continue
            variant = by_stock.get(row.cleaned_data["stock_id"])
            if variant is None:
                continue  # a row this product does not have: ignored
            try:
                stock_adjust(
                    sku=variant.sku,
                    set_to=row.cleaned_data["new_on_hand"],
                    expected_version=row.cleaned_data["loaded_version"],
                    reason=reason,
                    actor=request.user,
                )
            except StaleStock:
                refused.append(f"{variant.sku}: {STALE_MESSAGE}")
            except BelowReserved as exc:
                refused.append(f"{variant.sku}: it cannot go below the {exc.payload['reserved']} units reserved.")
            except DomainError as exc:
                refused.append(f"{variant.sku}: nothing was saved. {exc.as_text()}")
            else:
                done.append(f"{variant.sku}: on hand {row.initial['new_on_hand']} → {row.cleaned_data['new_on_hand']}")
        return done, refused


admin.site.unregister(ProductVariant)
admin.site.register(ProductVariant, VariantStockAdmin)
admin.site.unregister(Product)
admin.site.register(Product, ProductStockAdmin)
