"""The catalog in the admin. A product's stock is shown here but changed on its stock page (through the service)."""

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.db.models import F
from django.urls import reverse
from django.utils.html import format_html

from core.admin import NonAtomicChangeformMixin, ReadOnlyAdminMixin, SoftDeleteAdmin
from core.errors import DomainError
from inventory.admin import LowStockFilter
from inventory.models import Stock
from inventory.services import stock_restock
from shop.models import Product, sku_normalise
from shop.services import product_create

admin.site.site_header = "Shop administration"
admin.site.site_title = "Shop admin"
admin.site.index_title = "Catalog, stock and orders"


class ProductAddForm(forms.ModelForm):
    initial_stock = forms.IntegerField(
        min_value=0,
        max_value=settings.MAX_STOCK_QUANTITY,
        initial=0,
        required=False,
        help_text="Units received now, recorded in the stock ledger as a restock.",
    )

    class Meta:
        model = Product
        fields = ["sku", "name", "description", "price"]
        labels = {"sku": "SKU"}
        help_texts = {"sku": "Letters, digits, '.', '_' or '-'; stored in upper case. It cannot be changed later."}

    def clean_sku(self):
        """Upper-cased like every SKU; unique among deleted products too (the form's own check skips them)."""
        sku = sku_normalise(self.cleaned_data["sku"])
        if Product.all_objects.filter(sku=sku).exists():
            raise ValidationError(
                'A product with this SKU already exists. If it was deleted, filter "Deleted: Yes" and restore it.'
            )
        return sku


class StockInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = Stock
    fields = readonly_fields = ["on_hand", "reserved", "available", "version", "updated_at", "set_on_hand"]

    @admin.display(description="")
    def set_on_hand(self, stock):
        return format_html('<a href="{}">Set on hand…</a>', reverse("admin:inventory_stock_change", args=[stock.pk]))


@admin.register(Product)
class ProductAdmin(NonAtomicChangeformMixin, SoftDeleteAdmin):
    list_display = ["sku", "name", "price", "is_active", "on_hand", "reserved", "available", "is_deleted"]
    list_filter = ["is_active", LowStockFilter]
    search_fields = ["sku", "name"]
    ordering = ["sku"]
    inlines = [StockInline]

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

    def get_fieldsets(self, request, obj=None):
        if obj is None:
            return [(None, {"fields": ["sku", "name", "description", "price", "is_active", "initial_stock"]})]
        return [
            (None, {"fields": ["sku", "name", "description", "price", "is_active"]}),
            ("Record", {"fields": ["created_at", "updated_at", "is_deleted", "deleted_at"]}),
        ]

    def get_readonly_fields(self, request, obj=None):
        # The SKU names the stock lock: renaming it under a running order would split the lock.
        return ["sku", "created_at", "updated_at", "is_deleted", "deleted_at"] if obj else []

    def get_form(self, request, obj=None, **kwargs):
        if obj is None:
            kwargs["form"] = ProductAddForm
        return super().get_form(request, obj, **kwargs)

    def get_inline_instances(self, request, obj=None):
        return super().get_inline_instances(request, obj) if obj else []

    def save_model(self, request, obj, form, change):
        if change:
            # Only what the form changed: a concurrent delete or restore is not written back.
            if form.changed_data:
                obj.save(update_fields=[*form.changed_data, "updated_at"])
            return
        # product_create also creates the Stock row every product needs; the admin goes on with ``obj``.
        obj.pk = product_create(
            sku=obj.sku,
            name=obj.name,
            description=obj.description,
            price=obj.price,
            is_active=obj.is_active,
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
        Stock.objects.filter(product=obj, movements__isnull=True).delete()
        obj.hard_delete()

    @admin.display(description="on hand", ordering="on_hand_units")
    def on_hand(self, product):
        return product.on_hand_units

    @admin.display(description="reserved", ordering="reserved_units")
    def reserved(self, product):
        return product.reserved_units

    @admin.display(description="available", ordering="available_units")
    def available(self, product):
        return product.available_units
