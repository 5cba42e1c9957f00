"""The catalog in the admin: products' catalog fields and soft delete.

``inventory.admin`` registers this admin again with the product's stock (columns, filter, inline, initial
stock): the catalog knows nothing of stock.
"""

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError

from core.admin import SoftDeleteAdmin
from shop.models import Product, sku_normalise

admin.site.site_header = "Shop administration"
admin.site.site_title = "Shop admin"
admin.site.index_title = "Catalog, stock and orders"


class ProductAddForm(forms.ModelForm):
    class Meta:
        model = Product
        fields = [
            "sku",
            "name",
            "description",
            "price",
            "max_per_customer",
            "sale_starts_at",
            "sale_price",
            "sale_price_from",
            "sale_price_until",
            "requires_shipping",
            "weight_grams",
            "tax_class",
        ]
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


@admin.register(Product)
class ProductAdmin(SoftDeleteAdmin):
    list_display = ["sku", "name", "price", "is_active", "is_deleted"]
    list_filter = ["is_active"]
    search_fields = ["sku", "name"]
    ordering = ["sku"]
    add_form = ProductAddForm
    add_fields = ["sku", "name", "description", "price", "is_active"]
    sale_fieldset = (
        "Flash sale",
        {
            "fields": ["max_per_customer", "sale_starts_at"],
            "description": "Empty: no limit per customer; on sale now. Orders before the start are refused.",
        },
    )
    sale_price_fieldset = (
        "Sale price",
        {
            "fields": ["sale_price", "sale_price_from", "sale_price_until"],
            "description": "Charged instead of the price from its start (empty: now) until its end (empty: until "
            "removed), on the database's clock.",
        },
    )

    shipping_fieldset = (
        "Shipping and tax",
        {
            "fields": ["requires_shipping", "weight_grams", "tax_class"],
            "description": "A ticket or a gift card is not shipped: its orders ask for no address.",
        },
    )

    def get_fieldsets(self, request, obj=None):
        if obj is None:
            return [
                (None, {"fields": self.add_fields}),
                self.sale_fieldset,
                self.sale_price_fieldset,
                self.shipping_fieldset,
            ]
        return [
            (None, {"fields": ["sku", "name", "description", "price", "is_active"]}),
            self.sale_fieldset,
            self.sale_price_fieldset,
            self.shipping_fieldset,
            ("Record", {"fields": ["created_at", "updated_at", "is_deleted", "deleted_at"]}),
        ]

    def get_readonly_fields(self, request, obj=None):
        # The SKU names the stock lock: renaming it under a running order would split the lock.
        return ["sku", "created_at", "updated_at", "is_deleted", "deleted_at"] if obj else []

    def get_form(self, request, obj=None, **kwargs):
        if obj is None:
            kwargs["form"] = self.add_form
        return super().get_form(request, obj, **kwargs)

    def save_model(self, request, obj, form, change):
        if not change:
            super().save_model(request, obj, form, change)
        # Only what the form changed: a concurrent delete or restore is not written back.
        elif form.changed_data:
            obj.save(update_fields=[*form.changed_data, "updated_at"])
