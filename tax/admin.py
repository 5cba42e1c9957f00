from django.contrib import admin

from core.admin import SoftDeleteAdmin
from tax.models import TaxClass, TaxRate


@admin.register(TaxClass)
class TaxClassAdmin(SoftDeleteAdmin):
    """Kinds of goods with their own rate in some countries (reduced VAT for books); products name one."""

    list_display = ["name"]
    search_fields = ["name"]


@admin.register(TaxRate)
class TaxRateAdmin(SoftDeleteAdmin):
    """A country's default rate (no class) and its classes' rates; a country without one is not taxed."""

    list_display = ["country", "tax_class_label", "rate"]
    list_filter = ["tax_class"]
    list_select_related = ["tax_class"]
    search_fields = ["country"]

    @admin.display(description="tax class", ordering="tax_class__name")
    def tax_class_label(self, rate):
        return rate.tax_class or "Default"
