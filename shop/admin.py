"""The catalog in the admin: products, their variants (the units of stock), categories, options, images.

``inventory.admin`` registers the product and variant admins again with stock (columns, filter, inline,
initial stock, variants generated from options, a product's stock in one list): the catalog knows nothing
of stock.
"""

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db.models import Count, Q
from django.utils.html import format_html
from treebeard.admin import TreeAdmin
from treebeard.forms import movenodeform_factory

from core.admin import SoftDeleteAdmin
from core.numbers import WholeNumberField
from shop.images import product_image_check, product_image_thumbnail_make
from shop.models import Category, Option, OptionValue, Product, ProductImage, ProductVariant, sku_normalise
from shop.services import option_values_place

admin.site.site_header = "Shop administration"
admin.site.site_title = "Shop admin"
admin.site.index_title = "Catalog, stock and orders"


class ProductVariantAddForm(forms.ModelForm):
    class Meta:
        model = ProductVariant
        fields = [
            "sku",
            "product",
            "name",
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
        help_texts = {
            "sku": "Letters, digits, '.', '_' or '-'; stored in upper case. It cannot be changed later.",
            "product": "Empty: a new product of this name, sold in this one variant.",
        }

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["product"].required = False

    def clean_sku(self):
        """Upper-cased like every SKU; unique among deleted products too (the form's own check skips them)."""
        sku = sku_normalise(self.cleaned_data["sku"])
        if ProductVariant.all_objects.filter(sku=sku).exists():
            raise ValidationError(
                'A variant with this SKU already exists. If it was deleted, filter "Deleted: Yes" and restore it.'
            )
        return sku


@admin.register(ProductVariant)
class ProductVariantAdmin(SoftDeleteAdmin):
    list_display = ["sku", "name", "price", "is_active", "is_deleted"]
    list_filter = ["is_active"]
    search_fields = ["sku", "name"]
    ordering = ["sku"]
    autocomplete_fields = ["product"]
    filter_horizontal = ["option_values"]
    add_form = ProductVariantAddForm
    add_fields = ["sku", "product", "name", "price", "is_active"]
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
            (None, {"fields": ["sku", "product", "name", "option_values", "price", "is_active"]}),
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


@admin.register(Category)
class CategoryAdmin(TreeAdmin):
    """The tree, drag and drop; a category is placed by choosing its parent and neighbour."""

    form = movenodeform_factory(Category)
    list_display = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    search_fields = ["name"]


class OptionValueForm(forms.ModelForm):
    # Left empty, a new value goes after the others (shop.services.option_values_place).
    position = WholeNumberField(required=False, max_value=32767, help_text="Empty: after the others.")

    class Meta:
        model = OptionValue
        fields = ["value", "position"]


class OptionValueInline(admin.TabularInline):
    model = OptionValue
    form = OptionValueForm
    fields = ["value", "position"]
    extra = 3


@admin.register(Option)
class OptionAdmin(admin.ModelAdmin):
    list_display = ["name", "values_shown"]
    search_fields = ["name"]
    inlines = [OptionValueInline]

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("values")

    def save_formset(self, request, form, formset, change):
        if formset.model is OptionValue:
            values = formset.save(commit=False)
            option_values_place(option=form.instance, values=values)
            for value in values:
                value.save()
            for value in formset.deleted_objects:
                value.delete()
            return
        super().save_formset(request, form, formset, change)

    @admin.display(description="values")
    def values_shown(self, option):
        return ", ".join(value.value for value in option.values.all())


class ProductImageForm(forms.ModelForm):
    class Meta:
        model = ProductImage
        fields = ["image", "alt", "variant", "position"]

    def clean_image(self):
        """Refused with a message staff can act on: not an image, an unsupported type, too large."""
        image = self.cleaned_data["image"]
        if image and "image" in self.changed_data:
            product_image_check(image)
        return image


class ProductImageInline(admin.TabularInline):
    model = ProductImage
    form = ProductImageForm
    fields = ["image", "preview", "alt", "variant", "position"]
    readonly_fields = ["preview"]
    extra = 1

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        """Only this product's variants."""
        if db_field.name == "variant":
            product_id = request.resolver_match.kwargs.get("object_id")
            kwargs["queryset"] = ProductVariant.objects.filter(product_id=product_id or 0)
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    @admin.display(description="thumbnail")
    def preview(self, image):
        if not image.thumbnail:
            return "-"
        return format_html('<img src="{}" alt="{}" width="80">', image.thumbnail.url, image.alt)


@admin.register(Product)
class ProductAdmin(SoftDeleteAdmin):
    """What customers browse; its variants are listed and made on the variant and stock pages."""

    list_display = ["name", "category", "variant_count", "is_deleted"]
    list_filter = ["category"]
    list_select_related = ["category"]
    search_fields = ["name", "variants__sku"]
    ordering = ["name"]
    fields = ["name", "description", "category"]
    inlines = [ProductImageInline]

    def get_queryset(self, request):
        alive = Count("variants", filter=Q(variants__is_deleted=False))
        return super().get_queryset(request).annotate(variants_alive=alive)

    def delete_queryset(self, request, queryset):
        """A deleted product takes its variants out of sale with it (soft too: orders keep them)."""
        ProductVariant.objects.filter(product__in=queryset.filter(is_deleted=False)).delete()
        super().delete_queryset(request, queryset)

    @admin.display(description="variants", ordering="variants_alive")
    def variant_count(self, product):
        return product.variants_alive

    def save_formset(self, request, form, formset, change):
        """New images get their thumbnail, made once here."""
        super().save_formset(request, form, formset, change)
        if formset.model is ProductImage:
            for image in formset.new_objects + [obj for obj, _ in formset.changed_objects]:
                product_image_thumbnail_make(image)
