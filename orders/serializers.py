"""What the order API reads and shows: addresses, lines, the order with what happened after payment,
and the answers it refuses with. Shared by the APIs of orders, payments and fulfilment."""

from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers

from core.api import ErrorSerializer, FieldsBoundOnce, StrictCharField, StrictIntegerField
from core.errors import InvalidInput
from inventory.apis import InsufficientStockErrorSerializer
from orders.models import Order
from shipping.serializers import AddressSerializer
from shop.models import SKU_MAX_LENGTH
from vouchers.errors import VoucherInvalid


def money_field(**kwargs):
    return serializers.DecimalField(max_digits=12, decimal_places=2, **kwargs)


def rate_field(**kwargs):
    return serializers.DecimalField(max_digits=6, decimal_places=3, help_text="Percent.", **kwargs)


class ShippingMethodOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField(allow_null=True, help_text="The method's id (null once staff deleted it).")
    name = serializers.CharField()
    price = money_field()


class OrderLineOutputSerializer(serializers.Serializer):
    sku = serializers.CharField(source="variant.sku")
    name = serializers.CharField(source="variant.name")
    quantity = serializers.IntegerField()
    quantity_shipped = serializers.IntegerField(help_text="Units sent in shipments so far.")
    quantity_refunded = serializers.IntegerField(help_text="Units refunded so far (or being refunded).")
    quantity_returned = serializers.IntegerField(
        help_text="Of those, units shipped that came back with an accepted return; a refund takes units not yet "
        "shipped first, so what is left to ship is quantity - quantity_shipped, less the refunded units beyond "
        "those returned and shipped."
    )
    unit_price = money_field()
    line_total = money_field()
    tax_rate = rate_field()
    tax = money_field(help_text="On line_total less discount; included in it if prices_include_tax, else added to it.")
    discount = money_field(help_text="The line's share of the order's discount.")


class ShipmentLineOutputSerializer(serializers.Serializer):
    sku = serializers.CharField(source="order_line.variant.sku")
    quantity = serializers.IntegerField()


class ShipmentOutputSerializer(serializers.Serializer):
    carrier = serializers.CharField()
    tracking_number = serializers.CharField(help_text="Empty: none given.")
    tracking_url = serializers.CharField(help_text="Where the parcel is followed; empty: none given.")
    shipped_at = serializers.DateTimeField(source="created_at")
    lines = ShipmentLineOutputSerializer(many=True, source="lines.all")


class RefundLineOutputSerializer(ShipmentLineOutputSerializer):
    restocked = serializers.IntegerField(
        source="quantity_restocked",
        help_text="Of them, units put back on hand once it succeeds: a return's, or with restock those never shipped.",
    )


class RefundOutputSerializer(serializers.Serializer):
    amount = money_field(help_text="What went back: the units' share of what the lines paid, plus the shipping part.")
    shipping = money_field(help_text="The shipping's part of amount.")
    state = serializers.CharField(help_text="requested (the provider is confirming it) or succeeded.")
    refunded_at = serializers.DateTimeField(source="created_at")
    lines = RefundLineOutputSerializer(many=True, source="lines.all")


class ReturnOutputSerializer(FieldsBoundOnce):
    id = serializers.IntegerField(help_text="What staff accept or refuse it by.")
    state = serializers.CharField(help_text="requested, accepted (its units refunded) or refused.")
    reason = serializers.CharField(help_text="The buyer's words.")
    answer = serializers.CharField(help_text="Staff's words, once decided.")
    refunded = money_field(
        source="refund.amount", allow_null=True, help_text="Accepted: what its refund gave back; else null."
    )
    requested_at = serializers.DateTimeField(source="created_at")
    lines = ShipmentLineOutputSerializer(many=True, source="lines.all")


class OrderOutputSerializer(FieldsBoundOnce):
    """An order as the API shows it, with what happened after payment; rendered from these fields alone."""

    number = serializers.CharField()
    status = serializers.CharField()
    email = serializers.CharField()
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    paid_at = serializers.DateTimeField(allow_null=True)
    shipping_address = AddressSerializer(allow_null=True, help_text="null: nothing in the order is shipped.")
    billing_address = AddressSerializer(
        source="billing_address_or_shipping", allow_null=True, help_text="The shipping address unless one was given."
    )
    shipping_method = ShippingMethodOutputSerializer(source="shipping_method_chosen", allow_null=True)
    currency = serializers.CharField(help_text="ISO 4217 code of every amount.")
    prices_include_tax = serializers.BooleanField()
    subtotal = money_field(help_text="The lines' totals.")
    voucher_code = serializers.CharField(help_text="The voucher applied; empty: none.")
    discount = money_field(help_text="What the voucher took off the subtotal (the lines' discounts).")
    shipping_price = money_field()
    tax = money_field(help_text="The lines' and the shipping's tax.")
    total = money_field(
        help_text="What is charged: subtotal - discount + shipping_price (+ tax unless prices include it)."
    )
    lines = OrderLineOutputSerializer(many=True, source="lines.all")
    shipments = ShipmentOutputSerializer(many=True, source="shipments.all", help_text="Oldest first.")
    amount_refunded = money_field(help_text="What refunds gave back so far, of total.")
    refunds = RefundOutputSerializer(many=True, source="refunds_shown", help_text="Oldest first.")
    returns = ReturnOutputSerializer(many=True, source="returns.all", help_text="Oldest first.")

    def get_fields(self):
        """The declared fields, then each buyer field (``Order.BUYER_FIELDS``) as given: empty for none."""
        return super().get_fields() | {
            name: serializers.CharField(help_text=buyer_field_help(name)) for name in Order.BUYER_FIELDS
        }


class BuyerFieldsInputSerializer(serializers.Serializer):
    """An order's input with the buyer fields (``Order.BUYER_FIELDS``): each optional text, no longer than
    its column."""

    def get_fields(self):
        return super().get_fields() | {
            name: StrictCharField(
                required=False,
                allow_blank=True,
                max_length=Order._meta.get_field(name).max_length,
                help_text=buyer_field_help(name),
            )
            for name in Order.BUYER_FIELDS
        }


def buyer_fields_given(data: dict) -> dict[str, str]:
    """The buyer fields of an input's ``validated_data``, for ``order_place(given=...)``."""
    return {name: data[name] for name in Order.BUYER_FIELDS if name in data}


def buyer_field_help(name: str) -> str | None:
    """What the API's schema says of a buyer field: its column's ``help_text``."""
    return str(Order._meta.get_field(name).help_text) or None


class OrderRefusedSerializer(InsufficientStockErrorSerializer):
    """Why an order was not placed (409): short stock, a limit per customer, a sale not open yet."""

    sku = serializers.CharField(required=False)
    limit = serializers.IntegerField(required=False, help_text="limit_exceeded: units one customer may hold")
    held = serializers.IntegerField(required=False, help_text="limit_exceeded: units the customer holds")
    allowed = serializers.IntegerField(required=False, help_text="limit_exceeded: how many more may be ordered")
    starts_at = serializers.DateTimeField(required=False, help_text="sale_not_started: when the sale opens")
    country = serializers.CharField(
        required=False, help_text="shipping_unavailable, shipping_method_unavailable: the country's ISO code"
    )
    methods = serializers.ListField(
        child=serializers.IntegerField(), required=False, help_text="shipping_method_unavailable: the ids that go"
    )
    voucher = serializers.CharField(required=False, help_text="voucher_invalid: the code, in capitals")
    reason = serializers.ChoiceField(
        choices=sorted(VoucherInvalid.REASONS), required=False, help_text="voucher_invalid: why it does not apply"
    )


IDEMPOTENCY_KEY = OpenApiParameter(
    name="Idempotency-Key",
    location=OpenApiParameter.HEADER,
    required=True,
    type=str,
    description="Unique per order attempt: a retry with the same key and body returns the same order.",
)
NOT_FOUND = OpenApiResponse(ErrorSerializer, description="not_found (no such order of yours), order_not_found")
BUSY = OpenApiResponse(
    ErrorSerializer,
    description="lock_timeout or lock_unavailable (nothing changed), lock_timeout with outcome 'unknown' or "
    "database_unavailable (it may have happened: retry with the same Idempotency-Key); see Retry-After",
)


class LinesRefusedSerializer(ErrorSerializer):
    class ShortLineSerializer(serializers.Serializer):
        sku = serializers.CharField()
        requested = serializers.IntegerField()
        left = serializers.IntegerField(required=False)

    lines = ShortLineSerializer(
        many=True,
        required=False,
        help_text="shipment_exceeds_order, refund_exceeds_order: per SKU, the units asked and those left",
    )
    shipping = serializers.BooleanField(
        required=False, help_text="refund_exceeds_order: the shipping is refunded already"
    )


class OrderLineQuantityInputSerializer(serializers.Serializer):
    sku = serializers.CharField(max_length=SKU_MAX_LENGTH)
    quantity = StrictIntegerField(min_value=1, max_value=settings.MAX_LINE_QUANTITY)


def quantities_by_sku(lines: list[dict]) -> dict[str, int]:
    """Units by SKU from the input's lines; a SKU given twice is refused."""
    quantities = {}
    for line in lines:
        if line["sku"] in quantities:
            raise InvalidInput(fields={line["sku"]: "Each SKU may appear only once."})
        quantities[line["sku"]] = line["quantity"]
    return quantities
