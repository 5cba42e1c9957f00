from django.contrib import admin

from accounts.models import Account
from core.admin import ReadOnlyAdminMixin


@admin.register(Account)
class AccountAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Customers who signed up: their email and whether they proved it (they log in only once they have)."""

    list_display = ["email", "user", "email_verified_at", "created_at"]
    list_select_related = ["user"]
    list_filter = [("email_verified_at", admin.EmptyFieldListFilter)]
    search_fields = ["email", "user__username"]
    fields = readonly_fields = ["user", "email", "email_verified_at", "created_at"]
