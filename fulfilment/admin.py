"""Admin of shipments and returns, and the order admin as registered: the order's whole life (its lines,
payments, refunds, shipments and returns), which only this app, the top of that life, sees."""

import logging

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path

import orders.admin
from core.admin import ReadOnlyAdminMixin
from core.errors import DomainError
from core.numbers import WholeNumberField
from fulfilment.models import (
    CARRIER_MAX_LENGTH,
    TRACKING_NUMBER_MAX_LENGTH,
    TRACKING_URL_MAX_LENGTH,
    ReturnRequest,
    Shipment,
)
from fulfilment.services import Tracking, order_ship, return_request_accept, return_request_refuse
from orders.admin import UNCAPTIONED_TABULAR
from orders.models import Order
from payments.admin import OrderRefundAdminMixin, PaymentInline, RefundInline

logger = logging.getLogger(__name__)

Status = Order.Status


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


class ShipForm(forms.Form):
    """A shipment: the carrier and tracking, and per line the units it sends (what is left, by default)."""

    carrier = forms.CharField(max_length=CARRIER_MAX_LENGTH)
    tracking_number = forms.CharField(max_length=TRACKING_NUMBER_MAX_LENGTH, required=False)
    tracking_url = forms.URLField(max_length=TRACKING_URL_MAX_LENGTH, required=False, assume_scheme="https")

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


class OrderShipAdminMixin:
    """The order admin's shipments: a page to ship some or all of a paid order's units."""

    def get_urls(self):
        ship = path("<int:order_id>/ship/", self.admin_site.admin_view(self.ship_view), name="orders_order_ship")
        return [ship, *super().get_urls()]

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


@admin.register(Order)
class OrderAdmin(OrderShipAdminMixin, OrderRefundAdminMixin, orders.admin.OrderAdmin):
    inlines = [*orders.admin.OrderAdmin.inlines, ShipmentInline, ReturnInline, RefundInline, PaymentInline]
    actions = [*orders.admin.OrderAdmin.actions, "refund_and_restock", "refund_only"]


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
