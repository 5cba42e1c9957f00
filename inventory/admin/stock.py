"""Stock, its ledger and reservations in the admin. Counters change only through ``inventory.services``."""

import re

from django import forms
from django.conf import settings
from django.contrib import admin
from django.core.exceptions import ValidationError
from django.db.models import F, Q
from django.db.models.functions import Now
from django.forms.models import BaseInlineFormSet
from django.http import HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html
from django.utils.text import capfirst

from core.admin import GrowingTableAdminMixin, NonAtomicChangeformMixin, ReadOnlyAdminMixin
from core.errors import DomainError
from core.numbers import WholeNumberField
from inventory.errors import BelowReserved, StaleStock
from inventory.models import Reservation, Stock, StockMovement
from inventory.services import stock_adjust

# A reason another service records as a code (``refund_restock``), not as words staff typed.
REASON_CODE = re.compile(r"[a-z]+(_[a-z]+)+")
LOW_STOCK_THRESHOLD = 5
MOVEMENTS_SHOWN = 20
STALE_MESSAGE = "The stock changed while this form was open (an order or another edit), so nothing was saved."


class LowStockFilter(admin.SimpleListFilter):
    """Filters on ``available_units``, which the stock and product admins annotate on their querysets."""

    title = "stock level"
    parameter_name = "stock_level"

    def lookups(self, request, model_admin):
        return [
            ("out", "Out of stock"),
            ("low", f"Low ({LOW_STOCK_THRESHOLD} or fewer available)"),
            ("ok", f"More than {LOW_STOCK_THRESHOLD} available"),
        ]

    def queryset(self, request, queryset):
        if self.value() == "out":
            return queryset.filter(available_units__lte=0)
        if self.value() == "low":
            return queryset.filter(available_units__lte=LOW_STOCK_THRESHOLD)
        if self.value() == "ok":
            return queryset.filter(available_units__gt=LOW_STOCK_THRESHOLD)
        return None


class StockAdjustForm(forms.ModelForm):
    """Sets on-hand stock through ``stock_adjust``, compare-and-set on the version the form was loaded with.

    The service runs in ``clean()`` so that its refusals become form errors; the admin never saves the
    model itself (that would write back counters read before a concurrent order).
    """

    new_on_hand = WholeNumberField(
        label="New on hand",
        min_value=0,
        max_value=settings.MAX_STOCK_QUANTITY,
        help_text="Units physically in stock. It cannot go below what open orders have reserved.",
    )
    reason = forms.CharField(
        max_length=255, help_text="Why it changes (stock take, damaged goods...). Kept in the movement history."
    )
    loaded_version = WholeNumberField(widget=forms.HiddenInput, min_value=0)

    actor = None  # the staff user: StockAdmin.get_form sets it on the class it builds for each request

    class Meta:
        model = Stock
        fields = []

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["new_on_hand"].initial = self.instance.on_hand
        self.fields["loaded_version"].initial = self.instance.version
        self.summary = ""

    def clean(self):
        cleaned = super().clean()
        if self.errors:
            return cleaned
        before, loaded_version = self.instance.on_hand, cleaned["loaded_version"]
        try:
            stock = stock_adjust(
                sku=self.instance.variant.sku,
                set_to=cleaned["new_on_hand"],
                expected_version=loaded_version,
                reason=cleaned["reason"],
                actor=self.actor,
            )
        except StaleStock:
            raise self._refused_as_stale() from None
        except BelowReserved as exc:
            raise ValidationError(
                {"new_on_hand": f"It cannot go below the {exc.payload['reserved']} units reserved for open orders."}
            ) from None
        except DomainError as exc:
            raise ValidationError(f"Nothing was saved. {exc.as_text()}", code=exc.code) from None
        if stock.version == loaded_version:
            raise ValidationError({"new_on_hand": f"On hand is already {stock.on_hand}: nothing to change."})
        self.instance = stock
        self.summary = f"On hand {before} → {stock.on_hand}: {cleaned['reason']}"
        return cleaned

    def _refused_as_stale(self) -> ValidationError:
        """Show the current counters and carry their version, so saving again is a decision made on them."""
        self.instance.refresh_from_db()
        stock = self.instance
        self.data = self.data.copy()
        self.data[self.add_prefix("loaded_version")] = stock.version
        return ValidationError(
            f"{STALE_MESSAGE} It now has {stock.on_hand} on hand, {stock.reserved} reserved, "
            f"{stock.available} available. Check the new on-hand value and save again.",
            code=StaleStock.code,
        )


class MovementHistoryFormSet(BaseInlineFormSet):
    """The newest movements, for display only (the movement list pages through the whole ledger).

    Never bound to a POST: a refused form shows the history as it is now, including the order that
    made it stale, not the rows the browser happened to post back.
    """

    def __init__(self, data=None, files=None, **kwargs):
        super().__init__(**kwargs)

    def get_queryset(self):
        if not hasattr(self, "_recent"):
            self._recent = super().get_queryset()[:MOVEMENTS_SHOWN]
        return self._recent

    def is_valid(self):
        return True  # nothing in it is submitted

    def save(self, commit=True):
        return []  # the ledger is written by the service only


def movement_reason(movement) -> str:
    """A movement's reason in words: a release's reason by its label, a service's code spelt out, staff's
    own text as they wrote it."""
    if movement.kind == StockMovement.Kind.RELEASE and movement.reason in Reservation.ReleaseReason.values:
        return Reservation.ReleaseReason(movement.reason).label
    return capfirst(movement.reason.replace("_", " ")) if REASON_CODE.fullmatch(movement.reason) else movement.reason


class MovementInline(ReadOnlyAdminMixin, admin.TabularInline):
    model = StockMovement
    formset = MovementHistoryFormSet
    fields = readonly_fields = ["kind", "on_hand_delta", "reserved_delta", "why", "actor", "order", "created_at"]
    ordering = ["-id"]
    verbose_name_plural = f"movements (newest {MOVEMENTS_SHOWN})"

    def get_queryset(self, request):
        return super().get_queryset(request).select_related("actor", "order")

    @admin.display(description="reason")
    def why(self, movement):
        return movement_reason(movement)


@admin.register(Stock)
class StockAdmin(NonAtomicChangeformMixin, admin.ModelAdmin):
    form = StockAdjustForm
    list_display = ["sku", "variant_name", "on_hand", "reserved", "available", "version", "updated_at"]
    list_select_related = ["variant"]
    list_filter = [LowStockFilter, "variant__is_active"]
    search_fields = ["variant__sku", "variant__name"]
    ordering = ["variant__sku"]
    readonly_fields = ["variant", "on_hand", "reserved", "available", "version", "updated_at", "history"]
    inlines = [MovementInline]

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(available_units=F("on_hand") - F("reserved"))

    def get_fieldsets(self, request, obj=None):
        fieldsets = [
            (None, {"fields": ["variant", ("on_hand", "reserved", "available"), ("version", "updated_at"), "history"]})
        ]
        if self.has_change_permission(request, obj):
            fieldsets.append(
                (
                    "Set on hand",
                    {
                        "fields": ["new_on_hand", "reason", "loaded_version"],
                        "description": "Recorded as an adjustment in the ledger. If the stock changes while this "
                        "form is open (an order, another edit), saving is refused and shows the new values.",
                    },
                )
            )
        return fieldsets

    def get_form(self, request, obj=None, change=False, **kwargs):
        form = super().get_form(request, obj, change=change, **kwargs)
        form.actor = request.user
        return form

    def save_model(self, request, obj, form, change):
        """Nothing to save: the form already changed the stock through the service."""
        self.message_user(request, f"{obj.variant.sku}: {form.summary}")

    def construct_change_message(self, request, form, formsets, add=False):
        return form.summary

    def response_change(self, request, obj):
        """Stay on this stock's page, where the new movement heads the history."""
        return HttpResponseRedirect(request.get_full_path())

    def has_add_permission(self, request):
        return False  # every product gets its stock row when it is created

    def has_delete_permission(self, request, obj=None):
        return False  # reservations and the ledger refer to it

    @admin.display(description="SKU", ordering="variant__sku")
    def sku(self, stock):
        return stock.variant.sku

    @admin.display(description="product", ordering="variant__name")
    def variant_name(self, stock):
        return stock.variant.name

    @admin.display(description="available", ordering="available_units")
    def available(self, stock):
        return stock.available

    @admin.display(description="history")
    def history(self, stock):
        url = reverse("admin:inventory_stockmovement_changelist") + f"?stock__id__exact={stock.pk}"
        return format_html('<a href="{}">All {} movements</a>', url, stock.movements.count())


@admin.register(StockMovement)
class StockMovementAdmin(GrowingTableAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    """The ledger, paginated: append-only, so there is nothing to edit."""

    list_display = ["created_at", "sku", "kind", "on_hand_delta", "reserved_delta", "why", "actor", "order"]
    list_select_related = ["stock__variant", "actor", "order"]
    list_filter = ["kind", "created_at"]
    search_fields = ["stock__variant__sku", "reason", "order__number"]
    ordering = ["-id"]
    fields = ["stock", "kind", "on_hand_delta", "reserved_delta", "why", "actor", "order", "reservation"]
    readonly_fields = ["why"]

    @admin.display(description="SKU", ordering="stock__variant__sku")
    def sku(self, movement):
        return movement.stock.variant.sku

    @admin.display(description="reason", ordering="reason")
    def why(self, movement):
        return movement_reason(movement)


class ReservationExpiredFilter(admin.SimpleListFilter):
    """Active reservations past their expiry: stock the sweep should have released already."""

    title = "expired"
    parameter_name = "expired"

    def lookups(self, request, model_admin):
        return [("yes", "Yes: active past expiry"), ("no", "No")]

    def queryset(self, request, queryset):
        expired = Q(state=Reservation.State.ACTIVE, expires_at__lte=Now())
        if self.value() == "yes":
            return queryset.filter(expired)
        if self.value() == "no":
            return queryset.exclude(expired)
        return None


@admin.register(Reservation)
class ReservationAdmin(GrowingTableAdminMixin, ReadOnlyAdminMixin, admin.ModelAdmin):
    list_display = ["id", "order", "sku", "quantity", "state", "release_reason", "expires_at", "created_at"]
    list_select_related = ["order_line__order", "variant"]
    list_filter = ["state", "release_reason", ReservationExpiredFilter]
    search_fields = ["order_line__order__number", "variant__sku"]
    ordering = ["-id"]
    fields = ["order", "variant", "quantity", "state", "release_reason", "expires_at", "created_at", "updated_at"]

    @admin.display(description="order", ordering="order_line__order__number")
    def order(self, reservation):
        order = reservation.order_line.order
        return format_html('<a href="{}">{}</a>', reverse("admin:orders_order_change", args=[order.pk]), order.number)

    @admin.display(description="SKU", ordering="variant__sku")
    def sku(self, reservation):
        return reservation.variant.sku
