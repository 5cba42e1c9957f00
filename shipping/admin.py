from django.contrib import admin

from core.admin import SoftDeleteAdmin
from shipping.models import ShippingMethod, ShippingZone


class ShippingMethodInline(admin.TabularInline):
    model = ShippingMethod
    fields = ["name", "price", "free_above", "min_weight_grams", "max_weight_grams", "is_active"]
    extra = 1


@admin.register(ShippingZone)
class ShippingZoneAdmin(SoftDeleteAdmin):
    """Countries shipped to alike, and the methods that go there (checkout offers them cheapest first)."""

    list_display = ["name", "country_list", "method_count"]
    search_fields = ["name"]
    inlines = [ShippingMethodInline]

    @admin.display(description="countries")
    def country_list(self, zone):
        return ", ".join(country.name for country in zone.countries)

    @admin.display(description="methods")
    def method_count(self, zone):
        return zone.methods.filter(is_active=True).count()
