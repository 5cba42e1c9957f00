"""Admin of payments, their providers' events and refunds; the order admin's refund page and actions."""

import logging

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from core.admin import GrowingTableAdminMixin, ReadOnlyAdminMixin
from core.errors import DomainError
from core.money import money_format
from core.numbers import WholeNumberField
from orders.admin import UNCAPTIONED_TABULAR
from orders.models import PAID_STATUSES, Order
from payments.models import Payment, PaymentEvent, Refund
from payments.services import order_refund, payment_review_accept, payment_review_refund

logger = logging.getLogger(__name__)

Status = Order.Status


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


class OrderRefundAdminMixin:
    """The order admin's refunds: a page to refund chosen units (and the shipping), and bulk actions."""

    def get_urls(self):
        refund = path(
            "<int:order_id>/refund/", self.admin_site.admin_view(self.refund_view), name="orders_order_refund"
        )
        return [refund, *super().get_urls()]

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
