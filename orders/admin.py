"""Orders in the admin: read-only records; their status changes only through ``orders.services`` (the actions).

``OrderAdmin`` is registered by ``fulfilment.admin``, with the payments' and shipments' parts added."""

import logging

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.actions import delete_selected as django_delete_selected
from django.contrib.auth import get_permission_codename
from django.db import transaction
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from core.admin import GrowingTableAdminMixin, ReadOnlyAdminMixin, SoftDeleteAdmin
from core.errors import DomainError
from core.moments import moment_format
from core.money import money_format
from orders.models import Order, OrderLine
from orders.selectors import order_list_deletable, order_list_overdue
from orders.services import order_cancel, order_release_expired

logger = logging.getLogger(__name__)

Status = Order.Status


class OrdersRevived(Exception):
    """Raised inside a delete's transaction to undo it: a payment revived these orders after the check."""

    def __init__(self, numbers: list[str]):
        super().__init__(
            f"a payment revived {', '.join(numbers)} after you confirmed (awaiting payment again, holding stock)"
        )


# The tabular inline without the per-row caption: the row's columns already say what it is.
UNCAPTIONED_TABULAR = "admin/edit_inline/tabular_uncaptioned.html"


class OverdueFilter(admin.SimpleListFilter):
    """Awaiting payment past the expiry: what the sweep (or "Release expired orders now") will release."""

    title = "expired"
    parameter_name = "expired"

    def lookups(self, request, model_admin):
        return [("yes", "Yes: unpaid past expiry"), ("no", "No")]

    def queryset(self, request, queryset):
        overdue = order_list_overdue().values("pk")
        if self.value() == "yes":
            return queryset.filter(pk__in=overdue)
        if self.value() == "no":
            return queryset.exclude(pk__in=overdue)
        return None


class OrderLineInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = OrderLine
    template = UNCAPTIONED_TABULAR
    fields = readonly_fields = [
        "variant",
        "quantity",
        "quantity_shipped",
        "quantity_refunded",
        "quantity_returned",
        "unit_price_shown",
        "line_total_shown",
        "reservation",
    ]

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("variant", "order").prefetch_related("reservations")

    @admin.display(description="unit price")
    def unit_price_shown(self, line):
        return money_format(line.unit_price, line.order.currency)

    @admin.display(description="line total")
    def line_total_shown(self, line):
        return money_format(line.line_total, line.order.currency)

    @admin.display(description="reservation")
    def reservation(self, line):
        return "; ".join(
            f"{r.quantity} {r.get_state_display().lower()}"
            + (f" ({r.get_release_reason_display().lower()})" if r.release_reason else "")
            + (f" until {moment_format(r.expires_at)}" if r.state == r.State.ACTIVE else "")
            for r in line.reservations.all()
        )


def _address_html(lines: list[str]) -> str:
    """An address's lines, one per row, escaped; "-" for none."""
    return format_html_join(mark_safe("<br>"), "{}", ((line,) for line in lines)) or "-"


class OrderAdmin(GrowingTableAdminMixin, SoftDeleteAdmin):
    list_display = ["number", "buyer_name", "status", "total_shown", "created_at", "deleted"]
    list_select_related = ["customer"]
    list_filter = ["status", OverdueFilter, "created_at"]
    search_fields = ["number", "email", "customer__username", "customer__email"]
    ordering = ["-created_at", "-id"]
    fieldsets = [
        (None, {"fields": ["number", "status", "customer_shown", "email", "total_shown", *Order.BUYER_FIELDS]}),
        (
            "Totals as placed",
            {
                "fields": [
                    "subtotal_shown",
                    "voucher_code",
                    "discount_shown",
                    "shipping_shown",
                    "tax_shown",
                    "prices_include_tax",
                ]
            },
        ),
        ("Shipping", {"fields": ["shipping_method_name", "shipping_address_shown", "billing_address_shown"]}),
        ("Reservation and payment", {"fields": ["expires_at", "paid_at", "payment_reference", "refunded_shown"]}),
        ("Record", {"fields": ["idempotency_key", "created_at", "updated_at", "is_deleted", "deleted_at"]}),
    ]
    inlines = [OrderLineInline]
    actions = [
        "delete_selected",
        *SoftDeleteAdmin.actions,
        "cancel_selected",
        "release_expired_now",
    ]

    class Media:
        css = {"all": ["core/admin.css"]}  # the list fits a 1280 px window

    def has_add_permission(self, request):
        return False  # orders are placed by customers, through order_place

    def has_change_permission(self, request, obj=None):
        return False  # status changes only through the services: see the actions

    def has_manage_permission(self, request):
        """Who may run the order services from the list: staff allowed to change orders."""
        return request.user.has_perm(f"{self.opts.app_label}.{get_permission_codename('change', self.opts)}")

    def get_deleted_objects(self, objs, request):
        """An order awaiting payment holds stock, and the expiry sweep skips deleted orders: cancel it first."""
        objs = list(objs)
        deleted, counts, perms_needed, protected = super().get_deleted_objects(objs, request)
        holding = [
            f"{order.number}: awaiting payment, it still holds stock (cancel it first)"
            for order in objs
            if order.status == Status.AWAITING_PAYMENT
        ]
        return deleted, counts, perms_needed, protected + holding

    def delete_queryset(self, request, queryset):
        """One UPDATE conditional on a final status, for the bulk action and (``delete_model``) for one order.

        A payment may have revived an expired order since ``get_deleted_objects`` looked; such an order
        raises ``OrdersRevived``, which rolls back the caller's transaction: the delete and its log entries.
        """
        selected = list(queryset.filter(is_deleted=False).values_list("pk", flat=True))
        order_list_deletable().filter(pk__in=selected).delete()
        if revived := list(Order.objects.filter(pk__in=selected).values_list("number", flat=True)):
            logger.info("delete of order(s) %s refused: a payment revived them", ", ".join(revived))
            raise OrdersRevived(revived)
        self.message_user(
            request, 'Deleted rows are hidden, not erased: filter "Deleted: Yes" and use "Restore selected".'
        )

    def delete_view(self, request, object_id, extra_context=None):
        """Django's delete view runs in a transaction: an order lost to a payment undoes it and is reported."""
        try:
            return super().delete_view(request, object_id, extra_context)
        except OrdersRevived as lost:
            self.message_user(request, f"Not deleted: {lost}; cancel it first.", messages.ERROR)
            return HttpResponseRedirect(reverse("admin:orders_order_change", args=[object_id]))

    @admin.action(description=django_delete_selected.short_description, permissions=["delete"])
    def delete_selected(self, request, queryset):
        """Django's bulk delete in one transaction, so an order lost to a payment undoes it all."""
        try:
            with transaction.atomic():
                return django_delete_selected(self, request, queryset)
        except OrdersRevived as lost:
            self.message_user(request, f"Nothing deleted: {lost}; cancel it first, or leave it out.", messages.ERROR)
            return None

    # Named apart from the model's fields: a list column or read-only field named like one shows the field.
    @admin.display(description="customer")
    def customer_shown(self, order):
        """The buyer's account, linked to their orders: a page every viewer of this one may open (the user
        admin needs permissions the shop's staff do not have, and their orders are what staff look for)."""
        if order.customer is None:
            return "guest"
        orders = f"{reverse('admin:orders_order_changelist')}?customer__id__exact={order.customer_id}"
        return format_html(
            '{} ({}) · <a href="{}">their orders</a>', order.customer.username, order.customer.email, orders
        )

    @admin.display(description="customer / email", ordering="email")
    def buyer_name(self, order):
        name = order.customer.username if order.customer else order.email
        return format_html('<span class="truncate" title="{}">{}</span>', name, name)

    @admin.display(description="total", ordering="total")
    def total_shown(self, order):
        return money_format(order.total, order.currency)

    @admin.display(description="subtotal")
    def subtotal_shown(self, order):
        return money_format(order.subtotal, order.currency)

    @admin.display(description="discount")
    def discount_shown(self, order):
        return money_format(order.discount, order.currency)

    @admin.display(description="shipping")
    def shipping_shown(self, order):
        return money_format(order.shipping_price, order.currency)

    @admin.display(description="refunded")
    def refunded_shown(self, order):
        return money_format(order.amount_refunded, order.currency)

    @admin.display(description="tax")
    def tax_shown(self, order):
        return money_format(order.tax, order.currency)

    @admin.display(description="shipping address")
    def shipping_address_shown(self, order):
        return _address_html(order.shipping_address_lines)

    @admin.display(description="billing address")
    def billing_address_shown(self, order):
        return _address_html(order.billing_address_lines)

    @admin.display(description="deleted", boolean=True, ordering="is_deleted")
    def deleted(self, order):
        return order.is_deleted

    @admin.action(description="Cancel selected orders (their stock is released)", permissions=["manage"])
    def cancel_selected(self, request, queryset):
        cancelled, already, refused = 0, 0, []
        for order in queryset:
            if order.status == Status.CANCELLED:
                already += 1
                continue
            try:
                order_cancel(order=order)
            except DomainError as exc:
                refused.append(f"{order.number} ({exc.code}: {exc.detail})")
            else:
                cancelled += 1
        if cancelled:
            self.message_user(request, f"Cancelled {cancelled} order(s); their stock is available again.")
        if already:
            self.message_user(request, f"{already} order(s) were already cancelled.", messages.INFO)
        if refused:
            self.message_user(request, "Not cancelled: " + "; ".join(refused), messages.ERROR)

    def changelist_view(self, request, extra_context=None):
        """Let "Release expired orders now" run with nothing ticked: it sweeps every overdue order anyway."""
        post = request.POST
        if request.method == "POST" and post.get("action") == "release_expired_now":
            if not post.getlist(helpers.ACTION_CHECKBOX_NAME):
                request.POST = post.copy()
                request.POST.setlist(helpers.ACTION_CHECKBOX_NAME, ["0"])
                request.POST["select_across"] = "1"
        return super().changelist_view(request, extra_context)

    @admin.action(
        description="Release expired orders now (every overdue order, selected or not)", permissions=["manage"]
    )
    def release_expired_now(self, request, queryset):
        result = order_release_expired(batch_size=settings.SWEEP_BATCH_SIZE)
        self.message_user(request, f"Released {result.done} expired order(s): {result.units} unit(s) back in stock.")
        if result.skipped:
            self.message_user(
                request,
                f"Skipped {len(result.skipped)} busy order(s); the next sweep retries them: "
                + ", ".join(result.skipped),
                messages.WARNING,
            )
