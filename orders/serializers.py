"""What the order API reads and shows: addresses, lines, the order with what happened after payment,
and the answers it refuses with. Shared by the APIs of orders, payments and fulfilment."""

from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse
from rest_framework import serializers

from core.api import ErrorSerializer, StrictIntegerField
from core.errors import InvalidInput
from inventory.apis import InsufficientStockErrorSerializer
from shipping.addresses import ADDRESS_FIELDS
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


class ReturnOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField(help_text="What staff accept or refuse it by.")
    state = serializers.CharField(help_text="requested, accepted (its units refunded) or refused.")
    reason = serializers.CharField(help_text="The buyer's words.")
    answer = serializers.CharField(help_text="Staff's words, once decided.")
    refunded = money_field(allow_null=True, help_text="Accepted: what its refund gave back; else null.")
    requested_at = serializers.DateTimeField(source="created_at")
    lines = ShipmentLineOutputSerializer(many=True, source="lines.all")

    def to_representation(self, return_request):
        money = self.fields["refunded"]
        return {
            "id": int(return_request.pk),
            "state": str(return_request.state),
            "reason": str(return_request.reason),
            "answer": str(return_request.answer),
            "refunded": money.to_representation(return_request.refund.amount) if return_request.refund else None,
            "requested_at": self.fields["requested_at"].to_representation(return_request.created_at),
            "lines": [
                {"sku": str(line.order_line.variant.sku), "quantity": int(line.quantity)}
                for line in return_request.lines.all()
            ],
        }


class OrderOutputSerializer(serializers.Serializer):
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

    def to_representation(self, order):
        """What the declared fields render, written out with their own formatting.

        DRF's generic rendering deep-copies every declared field for each serializer it makes, which
        cost an order request more than rendering it; tests/orders/test_api.py holds the two equal.
        """
        fields = self._declared_fields
        money, rate, time = (
            fields["total"],
            OrderLineOutputSerializer._declared_fields["tax_rate"],
            fields["created_at"],
        )
        billing = order.billing_address_or_shipping
        return {
            "number": str(order.number),
            "status": str(order.status),
            "email": str(order.email),
            "created_at": time.to_representation(order.created_at),
            "expires_at": time.to_representation(order.expires_at),
            "paid_at": None if order.paid_at is None else time.to_representation(order.paid_at),
            "shipping_address": address_output(order.shipping_address),
            "billing_address": address_output(billing),
            "shipping_method": None
            if (method := order.shipping_method_chosen) is None
            else {"id": method["id"], "name": str(method["name"]), "price": money.to_representation(method["price"])},
            "currency": str(order.currency),
            "prices_include_tax": bool(order.prices_include_tax),
            "subtotal": money.to_representation(order.subtotal),
            "voucher_code": str(order.voucher_code),
            "discount": money.to_representation(order.discount),
            "shipping_price": money.to_representation(order.shipping_price),
            "tax": money.to_representation(order.tax),
            "total": money.to_representation(order.total),
            "lines": [
                {
                    "sku": str(line.variant.sku),
                    "name": str(line.variant.name),
                    "quantity": int(line.quantity),
                    "quantity_shipped": int(line.quantity_shipped),
                    "quantity_refunded": int(line.quantity_refunded),
                    "quantity_returned": int(line.quantity_returned),
                    "unit_price": money.to_representation(line.unit_price),
                    "line_total": money.to_representation(line.line_total),
                    "tax_rate": rate.to_representation(line.tax_rate),
                    "tax": money.to_representation(line.tax),
                    "discount": money.to_representation(line.discount),
                }
                for line in order.lines.all()
            ],
            "shipments": [
                {
                    "carrier": str(shipment.carrier),
                    "tracking_number": str(shipment.tracking_number),
                    "tracking_url": str(shipment.tracking_url),
                    "shipped_at": time.to_representation(shipment.created_at),
                    "lines": [
                        {"sku": str(line.order_line.variant.sku), "quantity": int(line.quantity)}
                        for line in shipment.lines.all()
                    ],
                }
                for shipment in order.shipments.all()
            ],
            "amount_refunded": money.to_representation(order.amount_refunded),
            "refunds": [
                {
                    "amount": money.to_representation(refund.amount),
                    "shipping": money.to_representation(refund.shipping),
                    "state": str(refund.state),
                    "refunded_at": time.to_representation(refund.created_at),
                    "lines": [
                        {
                            "sku": str(line.order_line.variant.sku),
                            "quantity": int(line.quantity),
                            "restocked": int(line.quantity_restocked),
                        }
                        for line in refund.lines.all()
                    ],
                }
                for refund in order.refunds_shown
            ],
            "returns": [ReturnOutputSerializer().to_representation(returned) for returned in order.returns.all()],
        }


def address_output(address: dict | None) -> dict | None:
    """An address as the output shows it: every field, as stored."""
    return None if address is None else {field: str(address.get(field, "")) for field in ADDRESS_FIELDS}


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
