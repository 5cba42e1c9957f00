"""Drops in the admin: the variants a line sells, when it opens, the checkout window, units per buyer."""

from django.contrib import admin

from core.admin import SoftDeleteAdmin
from drops.models import Drop, DropVariant


class DropVariantInline(admin.TabularInline):
    model = DropVariant
    autocomplete_fields = ["variant"]
    extra = 1
    verbose_name, verbose_name_plural = (
        "variant",
        "variants (each in one drop at most; its sale starts at its own time)",
    )


@admin.register(Drop)
class DropAdmin(SoftDeleteAdmin):
    list_display = ["name", "line_opens_at", "checkout_window_seconds", "units_per_buyer", "line_on", "is_deleted"]
    list_filter = ["line_on"]
    search_fields = ["name"]
    ordering = ["-line_opens_at"]
    inlines = [DropVariantInline]
    fields = ["name", "line_opens_at", "checkout_window_seconds", "units_per_buyer", "line_on"]

    def view_on_site(self, obj):
        return f"/drops/{obj.pk}/"
