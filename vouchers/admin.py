"""Vouchers in the admin: codes, their terms, and their uses (reserved, committed, released) per order."""

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db.models import Count, Q

from core.admin import ReadOnlyAdminMixin, SoftDeleteAdmin
from vouchers.models import Voucher, VoucherUse, voucher_code_normal


class VoucherForm(forms.ModelForm):
    class Meta:
        model = Voucher
        fields = [
            "code",
            "description",
            "kind",
            "value",
            "minimum_subtotal",
            "starts_at",
            "ends_at",
            "usage_limit",
            "limit_per_customer",
            "products",
            "categories",
        ]
        help_texts = {"code": "Buyers may type it in any letter case; stored in capitals."}

    def clean_code(self):
        code = voucher_code_normal(self.cleaned_data["code"])
        if Voucher.all_objects.filter(code=code).exclude(pk=self.instance.pk).exists():
            raise ValidationError("A voucher with this code exists (perhaps deleted: filter Deleted: Yes).")
        return code

    def clean(self):
        data = super().clean()
        kind, value = data.get("kind"), data.get("value")
        if kind == Voucher.Kind.PERCENTAGE and value is not None and not 0 < value <= 100:
            self.add_error("value", "A percentage is more than 0 and at most 100.")
        if kind == Voucher.Kind.FIXED and value is not None and value <= 0:
            self.add_error("value", "Give the amount taken off.")
        starts, ends = data.get("starts_at"), data.get("ends_at")
        if starts and ends and ends <= starts:
            self.add_error("ends_at", "The end comes after the start.")
        limit = data.get("usage_limit")
        if limit is not None and self.instance.pk:
            held = Voucher.all_objects.filter(pk=self.instance.pk).values_list("uses_reserved", "uses_committed")
            in_use = sum(held.first() or (0, 0))
            if limit < in_use:
                self.add_error("usage_limit", f"{in_use} uses are held by orders already: at least that many.")
        return data


class VoucherUseInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = VoucherUse
    fields = ["order", "buyer", "state", "discount", "created_at", "updated_at"]
    readonly_fields = fields
    ordering = ["-id"]
    extra = 0
    max_num = 0
    show_change_link = False

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("order")


@admin.register(Voucher)
class VoucherAdmin(SoftDeleteAdmin):
    form = VoucherForm
    list_display = [
        "code",
        "kind",
        "value",
        "starts_at",
        "ends_at",
        "usage_limit",
        "limit_per_customer",
        "uses_reserved",
        "uses_committed",
        "uses_released",
    ]
    list_filter = ["kind"]
    search_fields = ["code", "description"]
    autocomplete_fields = ["products", "categories"]
    readonly_fields = ["uses_reserved", "uses_committed", "uses_released"]
    inlines = [VoucherUseInline]

    def get_queryset(self, request):
        return (
            super()
            .get_queryset(request)
            .annotate(released=Count("uses", filter=Q(uses__state=VoucherUse.State.RELEASED)))
        )

    @admin.display(description="uses released", ordering="released")
    def uses_released(self, voucher):
        return getattr(voucher, "released", None) if voucher.pk else 0


@admin.register(VoucherUse)
class VoucherUseAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Every order's use of a voucher, to find one by order number, buyer or code."""

    list_display = ["voucher", "order", "buyer", "state", "discount", "created_at", "updated_at"]
    list_filter = ["state"]
    search_fields = ["voucher__code", "order__number", "buyer"]
    list_select_related = ["voucher", "order"]
