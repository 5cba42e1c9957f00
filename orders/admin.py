"""Orders in the admin: read-only records; their status changes only through ``orders.services`` (the actions)."""

import logging

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.admin.actions import delete_selected as django_delete_selected
from django.contrib.auth import get_permission_codename
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.http import HttpResponseRedirect
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from core.admin import GrowingTableAdminMixin, ReadOnlyAdminMixin, SoftDeleteAdmin
from core.errors import DomainError
from core.moments import moment_format
from core.money import money_format
from core.numbers import WholeNumberField
from orders.models import PAID_STATUSES, Order, OrderLine, Payment, PaymentEvent, Refund, ReturnRequest, Shipment
from orders.selectors import order_list_deletable, order_list_overdue
from orders.services import (
    Tracking,
    order_cancel,
    order_refund,
    order_release_expired,
    order_ship,
    payment_review_accept,
    payment_review_refund,
    return_request_accept,
    return_request_refuse,
)

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


class ShipmentInline(ReadOnlyAdminMixin, admin.TabularInline):
    """The order's parcels: what each sent, with which carrier and tracking, shipped by whom."""

    model = Shipment
    template = UNCAPTIONED_TABULAR
    fields = readonly_fields = ["sent", "carrier", "tracking_number", "tracking_url", "shipped_by", "created_at"]

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("lines__order_line__variant")

    @admin.display(description="units")
    def sent(self, shipment):
        return ", ".join(f"{line.quantity} x {line.order_line.variant.sku}" for line in shipment.lines.all())


class RefundInline(ReadOnlyAdminMixin, admin.TabularInline):
    """Money given back: which units (restocked or not), the shipping, by whom, and the provider's answer."""

    model = Refund
    template = UNCAPTIONED_TABULAR
    fields = readonly_fields = [
        "amount_shown",
        "units",
        "shipping",
        "restock",
        "state",
        "source",
        "requested_by",
        "created_at",
    ]

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("order").prefetch_related("lines__order_line__variant")

    @admin.display(description="amount")
    def amount_shown(self, refund):
        return money_format(refund.amount, refund.order.currency)

    @admin.display(description="units")
    def units(self, refund):
        return (
            ", ".join(
                f"{line.quantity} x {line.order_line.variant.sku}"
                + (f" ({line.quantity_restocked} restocked)" if line.quantity_restocked else "")
                for line in refund.lines.all()
            )
            or "-"
        )


def _return_units(request: ReturnRequest) -> str:
    return ", ".join(f"{line.quantity} x {line.order_line.variant.sku}" for line in request.lines.all())


class ReturnInline(ReadOnlyAdminMixin, admin.TabularInline):
    """What the buyer asked to send back, and what staff decided (see Returns to accept or refuse)."""

    model = ReturnRequest
    template = UNCAPTIONED_TABULAR
    fields = readonly_fields = ["units", "state", "reason", "answer", "decided_by", "created_at"]

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("lines__order_line__variant")

    @admin.display(description="units")
    def units(self, request):
        return _return_units(request)


class PaymentInline(ReadOnlyAdminMixin, admin.TabularInline):
    """Every charge taken for the order and what became of it (captured, refunded, or not yet settled)."""

    model = Payment
    template = UNCAPTIONED_TABULAR
    fields = readonly_fields = [
        "provider",
        "reference",
        "amount_shown",
        "state",
        "refunded_shown",
        "created_at",
        "updated_at",
    ]

    @admin.display(description="amount")
    def amount_shown(self, payment):
        return money_format(payment.amount, payment.currency)

    @admin.display(description="amount refunded")
    def refunded_shown(self, payment):
        return money_format(payment.amount_refunded, payment.currency)


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


class RefundForm(forms.Form):
    """A refund: per line the units it gives back (none by default), the shipping, and whether to restock."""

    shipping = forms.BooleanField(required=False, label="Refund the shipping")
    restock = forms.BooleanField(
        required=False,
        label="Put the units back on hand",
        help_text="Those not shipped yet, which the refund takes first; units at the customer come back with a return.",
    )

    def __init__(self, *args, order, lines, **kwargs):
        super().__init__(*args, **kwargs)
        self.lines = lines
        for line in lines:
            left = line.quantity - line.quantity_refunded
            self.fields[f"line_{line.pk}"] = WholeNumberField(
                label=f"{line.variant.name} ({line.variant.sku})",
                min_value=0,
                max_value=left,
                initial=0,
                help_text=f"{line.quantity_refunded} of {line.quantity} refunded already; "
                f"{line.quantity_shipped} shipped, {line.quantity_returned} returned.",
            )
        if order.shipping_refunded or not order.shipping_price:
            del self.fields["shipping"]
        self.order_fields(["shipping", "restock"])

    def quantities(self) -> dict[str, int]:
        return {
            line.variant.sku: self.cleaned_data[f"line_{line.pk}"]
            for line in self.lines
            if self.cleaned_data[f"line_{line.pk}"]
        }


class ShipForm(forms.Form):
    """A shipment: the carrier and tracking, and per line the units it sends (what is left, by default)."""

    carrier = forms.CharField(max_length=100)
    tracking_number = forms.CharField(max_length=100, required=False)
    tracking_url = forms.URLField(max_length=500, required=False, assume_scheme="https")

    def __init__(self, *args, lines, **kwargs):
        super().__init__(*args, **kwargs)
        self.lines = lines
        for line in lines:
            units = line.units
            self.fields[f"line_{line.pk}"] = WholeNumberField(
                label=f"{line.variant.name} ({line.variant.sku})",
                min_value=0,
                max_value=units.shippable,
                initial=units.shippable,
                help_text=f"{units.shipped} of {units.ordered} shipped already"
                + (f"; {units.cancelled} refunded before shipping." if units.cancelled else "."),
            )

    def tracking(self) -> Tracking:
        data = self.cleaned_data
        return Tracking(carrier=data["carrier"], number=data["tracking_number"], url=data["tracking_url"])

    def quantities(self) -> dict[str, int]:
        return {
            line.variant.sku: self.cleaned_data[f"line_{line.pk}"]
            for line in self.lines
            if self.cleaned_data[f"line_{line.pk}"]
        }


@admin.register(Order)
class OrderAdmin(GrowingTableAdminMixin, SoftDeleteAdmin):
    list_display = ["number", "buyer_name", "status", "total_shown", "created_at", "deleted"]
    list_select_related = ["customer"]
    list_filter = ["status", OverdueFilter, "created_at"]
    search_fields = ["number", "email", "customer__username", "customer__email"]
    ordering = ["-created_at", "-id"]
    fieldsets = [
        (None, {"fields": ["number", "status", "customer_shown", "email", "total_shown"]}),
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
    inlines = [OrderLineInline, ShipmentInline, ReturnInline, RefundInline, PaymentInline]
    actions = [
        "delete_selected",
        *SoftDeleteAdmin.actions,
        "cancel_selected",
        "release_expired_now",
        "refund_and_restock",
        "refund_only",
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
    def get_urls(self):
        ship = path("<int:order_id>/ship/", self.admin_site.admin_view(self.ship_view), name="orders_order_ship")
        refund = path(
            "<int:order_id>/refund/", self.admin_site.admin_view(self.refund_view), name="orders_order_refund"
        )
        return [ship, refund, *super().get_urls()]

    def refund_view(self, request, order_id):
        """Refund chosen units of a paid order and optionally its shipping, restocked or not (``order_refund``)."""
        if not request.user.has_perm("orders.refund_order"):
            raise PermissionDenied
        order = get_object_or_404(Order, pk=order_id)
        lines = list(order.lines.select_related("variant").order_by("pk"))
        form = RefundForm(request.POST or None, order=order, lines=lines)
        if request.method == "POST" and form.is_valid():
            try:
                order = order_refund(
                    order=order,
                    quantities=form.quantities(),
                    shipping=form.cleaned_data.get("shipping", False),
                    restock=form.cleaned_data["restock"],
                    actor=request.user,
                )
            except DomainError as refusal:
                form.add_error(None, refusal.as_text())
            else:
                refunded = money_format(order.amount_refunded, order.currency)
                self.message_user(
                    request, f"Order {order.number}: refund sent; {refunded} refunded in all. The buyer is emailed."
                )
                return redirect("admin:orders_order_change", order.pk)
        context = {**self.admin_site.each_context(request), "opts": self.opts, "order": order, "form": form,
                   "title": f"Refund order {order.number}"}  # fmt: skip
        return TemplateResponse(request, "admin/orders/order/refund.html", context)

    def ship_view(self, request, order_id):
        """Ship some or all of a paid order's units, with the carrier and tracking number (``order_ship``)."""
        if not request.user.has_perm("orders.ship_order"):
            raise PermissionDenied
        order = get_object_or_404(Order, pk=order_id)
        lines = list(order.lines.select_related("variant").order_by("pk"))
        form = ShipForm(request.POST or None, lines=lines)
        if request.method == "POST" and form.is_valid():
            try:
                order_ship(order=order, tracking=form.tracking(), quantities=form.quantities(), actor=request.user)
            except DomainError as refusal:
                form.add_error(None, refusal.as_text())
            else:
                self.message_user(request, f"Order {order.number}: shipment recorded; the buyer is emailed.")
                return redirect("admin:orders_order_change", order.pk)
        context = {**self.admin_site.each_context(request), "opts": self.opts, "order": order, "form": form,
                   "title": f"Ship order {order.number}"}  # fmt: skip
        return TemplateResponse(request, "admin/orders/order/ship.html", context)

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

    def has_refund_permission(self, request):
        return request.user.has_perm("orders.refund_order")

    @admin.action(description="Refund selected paid orders and restock their units not shipped", permissions=["refund"])
    def refund_and_restock(self, request, queryset):
        return self._refund(request, queryset, restock=True)

    @admin.action(description="Refund selected paid orders (their units stay sold)", permissions=["refund"])
    def refund_only(self, request, queryset):
        return self._refund(request, queryset, restock=False)

    def _refund(self, request, queryset, *, restock: bool):
        """Refund once staff confirmed it on a page saying what is refunded and whether its units go back."""
        if request.POST.get("post") != "yes":
            return self._refund_confirmation(request, queryset, restock=restock)
        refunded, sent, refused = [], [], []
        for order in queryset:
            if order.status == Order.Status.REFUNDED:
                refused.append(f"{order.number} (refunded already: nothing done)")
                continue
            try:
                order = order_refund(order=order, restock=restock, actor=request.user)
            except DomainError as exc:
                refused.append(f"{order.number} ({exc.code}: {exc.detail})")
                continue
            (refunded if order.status == Order.Status.REFUNDED else sent).append(order.number)
        restocked = "; their units not shipped are back on hand" if restock else ""
        if refunded:
            self.message_user(request, f"Refunded {len(refunded)} order(s){restocked}: {', '.join(refunded)}.")
        if sent:
            then = " and their units not shipped go back on hand" if restock else ""
            self.message_user(
                request,
                f"Refund sent to the provider for {', '.join(sent)}; they turn refunded{then} when the payment "
                "sweep finishes it (the stock was busy just now).",
                messages.WARNING,
            )
        if refused:
            self.message_user(request, "Not refunded: " + "; ".join(refused), messages.ERROR)
        return None

    def _refund_confirmation(self, request, queryset, *, restock: bool) -> TemplateResponse:
        orders = list(queryset.select_related("customer"))
        context = {
            **self.admin_site.each_context(request),
            "title": "Refund orders?",
            "opts": self.opts,
            "action": request.POST["action"],
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
            "restock": restock,
            "refundable": [order for order in orders if order.status in PAID_STATUSES],
            "left": [order for order in orders if order.status not in PAID_STATUSES],
            "changelist_url": reverse("admin:orders_order_changelist"),
        }
        return TemplateResponse(request, "admin/orders/order/refund_confirmation.html", context)

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


@admin.register(PaymentEvent)
class PaymentEventAdmin(GrowingTableAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    """The providers' webhook events as received: what the shop was told, and whether it was applied."""

    list_display = ["event_id", "type", "provider", "created_at", "processed"]
    list_filter = ["type", "provider"]
    search_fields = ["event_id"]
    fields = readonly_fields = ["event_id", "type", "provider", "payload", "created_at", "processed_at"]

    class Media:
        css = {"all": ["core/admin.css"]}  # the list fits a 1280 px window

    @admin.display(description="processed", boolean=True, ordering="processed_at")
    def processed(self, event):
        return event.processed_at is not None


@admin.register(Payment)
class PaymentAdmin(GrowingTableAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    """Every charge. One in ``review`` (the provider charged another amount or currency than asked) waits
    for staff: accept it as its order's payment (what it took beyond the total is refunded), or refund it all."""

    list_display = ["reference", "order", "state", "amount_shown", "charged_shown", "refunded_shown", "created_at"]
    list_select_related = ["order"]
    list_filter = ["state", "provider"]
    search_fields = ["reference", "order__number", "provider_payment"]
    fields = readonly_fields = [
        "order", "provider", "reference", "provider_payment", "state", "amount_shown", "charged_shown",
        "refunded_shown", "charged_at", "created_at", "updated_at",
    ]  # fmt: skip
    actions = ["review_accept", "review_refund"]

    class Media:
        css = {"all": ["core/admin.css"]}  # the list fits a 1280 px window

    def has_decide_permission(self, request):
        return request.user.has_perm("orders.refund_order")

    @admin.display(description="asked")
    def amount_shown(self, payment):
        return money_format(payment.amount, payment.currency)

    @admin.display(description="charged")
    def charged_shown(self, payment):
        if payment.charged_amount is None:
            return "-"
        return money_format(payment.charged_amount, payment.charged_currency or payment.currency)

    @admin.display(description="refunded")
    def refunded_shown(self, payment):
        return money_format(payment.amount_refunded, payment.charged_currency or payment.currency)

    @admin.action(description="Accept selected charges in review as their orders' payment", permissions=["decide"])
    def review_accept(self, request, queryset):
        self._decide(request, queryset, payment_review_accept, done="Accepted (any excess refunded)")

    @admin.action(description="Refund selected charges in review in full", permissions=["decide"])
    def review_refund(self, request, queryset):
        self._decide(request, queryset, payment_review_refund, done="Refunded")

    def _decide(self, request, queryset, decide, *, done: str) -> None:
        decided, refused = [], []
        for payment in queryset.select_related("order"):
            try:
                decide(payment=payment)
            except DomainError as refusal:
                refused.append(f"{payment.reference} of order {payment.order.number} ({refusal.as_text()})")
            else:
                decided.append(f"{payment.reference} of order {payment.order.number}")
                logger.warning("%s: payment %s, by %s", done, payment.reference, request.user)
        if decided:
            self.message_user(request, f"{done}: {', '.join(decided)}.")
        if refused:
            self.message_user(request, "Not done: " + "; ".join(refused), messages.ERROR)


@admin.register(ReturnRequest)
class ReturnRequestAdmin(ReadOnlyAdminMixin, admin.ModelAdmin):
    """Returns buyers asked for: accept (their units are refunded and restocked) or refuse; the buyer is emailed."""

    list_display = ["pk", "order", "state", "units", "reason", "created_at"]
    list_select_related = ["order"]
    list_filter = ["state", "created_at"]
    search_fields = ["order__number", "order__email"]
    fields = readonly_fields = ["order", "state", "units", "reason", "answer", "decided_by", "refund", "created_at"]
    actions = ["accept_selected", "refuse_selected"]

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("lines__order_line__variant")

    def has_decide_permission(self, request):
        return request.user.has_perm("orders.refund_order")

    @admin.display(description="units")
    def units(self, request):
        return _return_units(request)

    @admin.action(description="Accept selected returns (refund and restock their units)", permissions=["decide"])
    def accept_selected(self, request, queryset):
        self._decide(request, queryset, return_request_accept, done="Accepted and refunded")

    @admin.action(description="Refuse selected returns", permissions=["decide"])
    def refuse_selected(self, request, queryset):
        self._decide(request, queryset, return_request_refuse, done="Refused")

    def _decide(self, request, queryset, decide, *, done: str) -> None:
        decided, refused = [], []
        for return_request in queryset:
            try:
                decide(return_request=return_request, actor=request.user)
            except DomainError as refusal:
                refused.append(f"return {return_request.pk} ({refusal.as_text()})")
            else:
                decided.append(str(return_request.pk))
        if decided:
            self.message_user(request, f"{done}: return(s) {', '.join(decided)}; the buyers are emailed.")
        if refused:
            self.message_user(request, "Not done: " + "; ".join(refused), messages.ERROR)
