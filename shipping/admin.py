from django.contrib import admin

from core.admin import ReadOnlyAdminMixin, SoftDeleteAdmin
from shipping.models import AddressBookEntry, ShippingMethod, ShippingZone


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


@admin.register(AddressBookEntry)
class AddressBookEntryAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Customers' saved addresses (they edit them on their account page)."""

    list_display = ["user", "__str__", "is_default_shipping", "is_default_billing"]
    list_select_related = ["user"]
    search_fields = ["user__username", "user__email"]
    fields = readonly_fields = ["user", "address", "is_default_shipping", "is_default_billing", "created_at"]
