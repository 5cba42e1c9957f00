from django.conf import settings
from django.db.models import prefetch_related_objects
from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import generics, serializers, status
from rest_framework.exceptions import NotFound, Throttled
from rest_framework.permissions import BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ErrorSerializer, StrictCharField, StrictIntegerField
from core.errors import InvalidInput
from core.throttling import voucher_check_counted
from inventory.apis import InsufficientStockErrorSerializer
from orders.customers import buyer_of
from orders.errors import IdempotencyKeyRequired
from orders.selectors import order_find_by_number, order_find_for_customer, order_list_for_customer, return_find
from orders.services import (
    Tracking,
    order_cancel,
    order_pay,
    order_place,
    order_quote,
    order_refund,
    order_ship,
    return_request_accept,
    return_request_create,
    return_request_refuse,
)
from orders.throttling import OrderThrottle
from shipping.addresses import ADDRESS_FIELDS, address_clean
from shop.models import SKU_MAX_LENGTH
from vouchers.errors import VoucherInvalid


def _money(**kwargs):
    return serializers.DecimalField(max_digits=12, decimal_places=2, **kwargs)


def _rate(**kwargs):
    return serializers.DecimalField(max_digits=6, decimal_places=3, help_text="Percent.", **kwargs)


class AddressSerializer(serializers.Serializer):
    """A postal address, checked against its country's rules (``shipping.addresses``)."""

    full_name = serializers.CharField(max_length=ADDRESS_FIELDS["full_name"])
    line1 = serializers.CharField(max_length=ADDRESS_FIELDS["line1"])
    line2 = serializers.CharField(max_length=ADDRESS_FIELDS["line2"], required=False, allow_blank=True)
    city = serializers.CharField(max_length=ADDRESS_FIELDS["city"])
    postal_code = serializers.CharField(
        max_length=ADDRESS_FIELDS["postal_code"],
        required=False,
        allow_blank=True,
        help_text="Where the country uses one.",
    )
    region = serializers.CharField(
        max_length=ADDRESS_FIELDS["region"],
        required=False,
        allow_blank=True,
        help_text="State, province or prefecture, where the country uses one (its code or name).",
    )
    country = serializers.CharField(max_length=2, min_length=2, help_text="ISO 3166-1 alpha-2 code, e.g. DE.")
    phone = serializers.CharField(max_length=ADDRESS_FIELDS["phone"], required=False, allow_blank=True)

    def validate(self, attrs):
        try:
            return address_clean(attrs)
        except InvalidInput as exc:
            raise serializers.ValidationError(exc.payload["fields"]) from None


class ShippingMethodOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField(allow_null=True, help_text="The method's id (null once staff deleted it).")
    name = serializers.CharField()
    price = _money()


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
    unit_price = _money()
    line_total = _money()
    tax_rate = _rate()
    tax = _money(help_text="On line_total less discount; included in it if prices_include_tax, else added to it.")
    discount = _money(help_text="The line's share of the order's discount.")


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
    amount = _money(help_text="What went back: the units' share of what the lines paid, plus the shipping part.")
    shipping = _money(help_text="The shipping's part of amount.")
    state = serializers.CharField(help_text="requested (the provider is confirming it) or succeeded.")
    refunded_at = serializers.DateTimeField(source="created_at")
    lines = RefundLineOutputSerializer(many=True, source="lines.all")


class ReturnOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField(help_text="What staff accept or refuse it by.")
    state = serializers.CharField(help_text="requested, accepted (its units refunded) or refused.")
    reason = serializers.CharField(help_text="The buyer's words.")
    answer = serializers.CharField(help_text="Staff's words, once decided.")
    refunded = _money(allow_null=True, help_text="Accepted: what its refund gave back; else null.")
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
    subtotal = _money(help_text="The lines' totals.")
    voucher_code = serializers.CharField(help_text="The voucher applied; empty: none.")
    discount = _money(help_text="What the voucher took off the subtotal (the lines' discounts).")
    shipping_price = _money()
    tax = _money(help_text="The lines' and the shipping's tax.")
    total = _money(help_text="What is charged: subtotal - discount + shipping_price (+ tax unless prices include it).")
    lines = OrderLineOutputSerializer(many=True, source="lines.all")
    shipments = ShipmentOutputSerializer(many=True, source="shipments.all", help_text="Oldest first.")
    amount_refunded = _money(help_text="What refunds gave back so far, of total.")
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
            "shipping_address": _address_output(order.shipping_address),
            "billing_address": _address_output(billing),
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


def _address_output(address: dict | None) -> dict | None:
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
UNAUTHENTICATED = OpenApiResponse(ErrorSerializer, description="not_authenticated, authentication_failed")
CSRF_REFUSED = OpenApiResponse(ErrorSerializer, description="permission_denied: session auth without a CSRF token")
NOT_FOUND = OpenApiResponse(ErrorSerializer, description="not_found (no such order of yours), order_not_found")
BUSY = OpenApiResponse(
    ErrorSerializer,
    description="lock_timeout or lock_unavailable (nothing changed), lock_timeout with outcome 'unknown' or "
    "database_unavailable (it may have happened: retry with the same Idempotency-Key); see Retry-After",
)


def _order_of(request, number: str):
    order = order_find_for_customer(customer=request.user, number=number)
    if order is None:
        raise NotFound("No such order.")
    return order


class OrderCollectionApi(generics.ListAPIView):
    """GET lists the caller's orders; POST places one (reserving its stock)."""

    serializer_class = OrderOutputSerializer

    class OrderCreateInputSerializer(serializers.Serializer):
        class OrderLineInputSerializer(serializers.Serializer):
            sku = serializers.CharField(max_length=SKU_MAX_LENGTH)
            quantity = StrictIntegerField(min_value=1, max_value=settings.MAX_LINE_QUANTITY)

        items = OrderLineInputSerializer(
            many=True, allow_empty=False, min_length=1, max_length=settings.MAX_ORDER_LINES
        )
        shipping_address = AddressSerializer(
            required=False, allow_null=True, help_text="Required when any product is shipped."
        )
        billing_address = AddressSerializer(
            required=False, allow_null=True, help_text="Omit or null: the shipping address."
        )
        shipping_method = StrictIntegerField(
            required=False,
            allow_null=True,
            min_value=1,
            help_text="The id of a method the quote offers; required when any product is shipped.",
        )
        voucher = StrictCharField(
            required=False, allow_blank=True, max_length=40, help_text="A voucher code, in any letter case."
        )

    def get_queryset(self):
        return order_list_for_customer(customer=self.request.user)

    @classmethod
    def order_request_checked(cls, request) -> tuple[dict, str, str]:
        """An order request, counted by the order throttle and checked: its data (items, addresses,
        method), its Idempotency-Key and the client address the throttle counted; a refusal is raised."""
        throttle = OrderThrottle(request)
        if not throttle.attempt():
            raise Throttled(wait=throttle.wait())
        key = request.headers.get("Idempotency-Key", "").strip()
        if not 1 <= len(key) <= 64:
            raise IdempotencyKeyRequired()
        data = cls.OrderCreateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return data.validated_data, key, throttle.client_address

    @extend_schema(
        operation_id="orders_list",
        responses={
            200: OrderOutputSerializer(many=True),
            400: OpenApiResponse(ErrorSerializer, description="invalid_input: a bad page_size"),
            401: UNAUTHENTICATED,
            404: OpenApiResponse(ErrorSerializer, description="not_found: no such page"),
        },
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    @extend_schema(
        operation_id="orders_create",
        parameters=[IDEMPOTENCY_KEY],
        request=OrderCreateInputSerializer,
        responses={
            201: OrderOutputSerializer,
            400: OpenApiResponse(
                ErrorSerializer,
                description="invalid_input, invalid_quantity, duplicate_line, unknown_sku, product_unavailable, "
                "malformed_json, idempotency_key_required",
            ),
            401: UNAUTHENTICATED,
            403: CSRF_REFUSED,
            409: OpenApiResponse(
                OrderRefusedSerializer,
                description="insufficient_stock, per SKU; limit_exceeded (sku, limit, held, allowed); "
                "sale_not_started (sku, starts_at); shipping_unavailable (country: no zone covers it); "
                "shipping_method_unavailable (country, methods: the ids that do go); voucher_invalid (voucher, "
                "reason: unknown, not_started, expired, used_up, limit_per_customer, minimum_not_met, "
                "not_applicable): nothing was placed",
            ),
            422: OpenApiResponse(ErrorSerializer, description="idempotency_conflict: key reused with another body"),
            429: OpenApiResponse(
                ErrorSerializer,
                description="throttled: too many orders, or refused voucher codes, from this customer or address; "
                "see Retry-After",
            ),
            503: BUSY,
        },
    )
    def post(self, request):
        data, key, client_address = self.order_request_checked(request)
        with voucher_check_counted(request, code=data.get("voucher", ""), refusals=(VoucherInvalid,)):
            order = order_place(
                customer=request.user,
                email=request.user.email,
                items=data["items"],
                idempotency_key=key,
                client_address=client_address,
                shipping_address=data.get("shipping_address"),
                billing_address=data.get("billing_address"),
                shipping_method=data.get("shipping_method"),
                voucher=data.get("voucher", ""),
            )
        prefetch_related_objects([order], "lines__variant")  # the lines and the total read them once
        return Response(OrderOutputSerializer(order).data, status=status.HTTP_201_CREATED)


class QuoteLineOutputSerializer(OrderLineOutputSerializer):
    quantity_shipped = None  # a quote ships nothing
    quantity_refunded = None
    quantity_returned = None


class QuoteOutputSerializer(serializers.Serializer):
    shipping_methods = ShippingMethodOutputSerializer(many=True, help_text="The methods that go, cheapest first.")
    shipping_method = serializers.IntegerField(
        allow_null=True, help_text="The method priced: the one asked for, else the cheapest; null: nothing shipped."
    )
    currency = serializers.CharField()
    prices_include_tax = serializers.BooleanField()
    subtotal = _money()
    voucher_code = serializers.CharField()
    discount = _money()
    shipping_price = _money()
    tax = _money()
    total = _money()
    lines = QuoteLineOutputSerializer(many=True)


class CheckoutQuoteApi(APIView):
    """What an order would cost, shipped to an address, without placing anything (stock is checked when
    the order is placed)."""

    @extend_schema(
        operation_id="checkout_quote",
        request=OrderCollectionApi.OrderCreateInputSerializer,
        responses={
            200: QuoteOutputSerializer,
            400: OpenApiResponse(
                ErrorSerializer,
                description="invalid_input (a missing or bad address field, no shipping address for shipped "
                "goods), invalid_quantity, duplicate_line, unknown_sku, product_unavailable, malformed_json",
            ),
            401: UNAUTHENTICATED,
            403: CSRF_REFUSED,
            409: OpenApiResponse(
                OrderRefusedSerializer,
                description="sale_not_started; shipping_unavailable (country); shipping_method_unavailable "
                "(country, methods); voucher_invalid (voucher, reason)",
            ),
            429: OpenApiResponse(
                ErrorSerializer, description="throttled: too many refused voucher codes from here; see Retry-After"
            ),
        },
    )
    def post(self, request):
        data = OrderCollectionApi.OrderCreateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        shipping, billing = data.validated_data.get("shipping_address"), data.validated_data.get("billing_address")
        voucher = data.validated_data.get("voucher", "")
        with voucher_check_counted(request, code=voucher, refusals=(VoucherInvalid,)):
            quote = order_quote(
                items=data.validated_data["items"],
                shipping_country=shipping["country"] if shipping else None,
                billing_country=billing["country"] if billing else None,
                shipping_method=data.validated_data.get("shipping_method"),
                voucher=voucher,
                buyer=buyer_of(customer=request.user),
            )
        price = quote.price
        if price is None:
            raise InvalidInput(fields={"shipping_address": "These goods are shipped: give a shipping address."})
        return Response(
            QuoteOutputSerializer(
                {
                    "shipping_methods": quote.shipping_offers,
                    "shipping_method": price.shipping_method.id if price.shipping_method else None,
                    "currency": price.currency,
                    "prices_include_tax": price.prices_include_tax,
                    "subtotal": price.subtotal,
                    "voucher_code": price.voucher_code,
                    "discount": price.discount,
                    "shipping_price": price.shipping_price,
                    "tax": price.tax,
                    "total": price.total,
                    "lines": [
                        {
                            "variant": {"sku": variant_sku, "name": variant.name},
                            "quantity": quantity,
                            "unit_price": variant.price,
                            "line_total": priced.line_total,
                            "tax_rate": priced.tax_rate,
                            "tax": priced.tax,
                            "discount": priced.discount,
                        }
                        for (variant, quantity), priced, variant_sku in zip(
                            quote.lines, price.lines, quote.skus, strict=True
                        )
                    ],
                }
            ).data
        )


class OrderDetailApi(APIView):
    @extend_schema(
        operation_id="orders_retrieve",
        responses={200: OrderOutputSerializer, 401: UNAUTHENTICATED, 404: NOT_FOUND},
    )
    def get(self, request, number: str):
        return Response(OrderOutputSerializer(_order_of(request, number)).data)


class PaymentOutputSerializer(serializers.Serializer):
    order = serializers.CharField(source="order.number")
    provider = serializers.CharField()
    reference = serializers.CharField(help_text="The provider's id of the checkout.")
    state = serializers.CharField(
        help_text="pending until the provider's webhook tells the outcome; charged (taken, being applied), then "
        "captured (paid), failed, refunding, refunded, or review (another amount was charged: staff decide)"
    )
    amount = serializers.DecimalField(max_digits=12, decimal_places=2)
    redirect_url = serializers.CharField(help_text="Where the buyer pays (the provider's page).")


class OrderPayApi(APIView):
    @extend_schema(
        operation_id="orders_pay",
        request=None,
        description="Start paying: the payment with the provider and the page where the buyer pays. The order "
        "turns paid, or payment_failed, when the provider's webhook arrives. A second call returns the same payment.",
        responses={
            200: PaymentOutputSerializer,
            401: UNAUTHENTICATED,
            403: CSRF_REFUSED,
            404: NOT_FOUND,
            409: OpenApiResponse(
                OrderRefusedSerializer,
                description="order_not_payable (cancelled, failed or refunded), order_expired (its stock is gone: "
                "shortages)",
            ),
            503: BUSY,
        },
    )
    def post(self, request, number: str):
        order = _order_of(request, number)
        return_url = request.build_absolute_uri(reverse("order-detail", args=[order.number]))
        return Response(PaymentOutputSerializer(order_pay(order=order, return_url=return_url)).data)


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


def _quantities_by_sku(lines: list[dict]) -> dict[str, int]:
    """Units by SKU from the input's lines; a SKU given twice is refused."""
    quantities = {}
    for line in lines:
        if line["sku"] in quantities:
            raise InvalidInput(fields={line["sku"]: "Each SKU may appear only once."})
        quantities[line["sku"]] = line["quantity"]
    return quantities


class RefundPermission(BasePermission):
    """Staff with the ``refund_order`` permission refund any customer's order."""

    def has_permission(self, request, view):
        return bool(request.user and request.user.is_staff and request.user.has_perm("orders.refund_order"))


class OrderRefundApi(APIView):
    permission_classes = [RefundPermission]

    class OrderRefundInputSerializer(serializers.Serializer):
        restock = serializers.BooleanField(
            help_text="Put back on hand (ledger: refund_restock) the units not yet shipped, which a refund takes "
            "first; units at the customer are refunded and not restocked (a return brings them back)."
        )
        lines = OrderLineQuantityInputSerializer(
            many=True,
            required=False,
            allow_empty=True,
            max_length=settings.MAX_ORDER_LINES,
            help_text="The units to refund; omit (and leave shipping out) to refund all that is left.",
        )
        shipping = serializers.BooleanField(
            required=False, help_text="Refund the shipping too (with lines; a full refund includes it)."
        )

    @extend_schema(
        operation_id="orders_refund",
        request=OrderRefundInputSerializer,
        description="Refund a paid order's lines, some units or all that is left, and optionally its shipping, "
        "through the provider it was paid with (staff with refund_order). The refunded amount never exceeds "
        "what was paid; the order turns refunded once all of it is back. The buyer is emailed each refund.",
        responses={
            200: OrderOutputSerializer,
            400: OpenApiResponse(ErrorSerializer, description="invalid_input (a SKU not in the order), malformed_json"),
            401: UNAUTHENTICATED,
            403: OpenApiResponse(ErrorSerializer, description="permission_denied: not staff with refund_order"),
            404: NOT_FOUND,
            409: OpenApiResponse(
                LinesRefusedSerializer,
                description="order_not_refundable: it is not paid; refund_exceeds_order (lines: sku, requested, "
                "left; shipping: refunded already)",
            ),
            502: OpenApiResponse(ErrorSerializer, description="refund_failed: the provider refused; nothing changed"),
            503: BUSY,
        },
    )
    def post(self, request, number: str):
        data = self.OrderRefundInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        order = order_find_by_number(number=number)
        if order is None:
            raise NotFound("No such order.")
        lines = data.validated_data.get("lines")
        shipping = data.validated_data.get("shipping", False)
        if lines is None and shipping:
            lines = []  # the shipping alone
        order_refund(
            order=order,
            quantities=None if lines is None else _quantities_by_sku(lines),
            shipping=shipping,
            restock=data.validated_data["restock"],
            actor=request.user,
        )
        return Response(OrderOutputSerializer(order_find_by_number(number=number)).data)


class ShipPermission(BasePermission):
    """Staff with the ``ship_order`` permission ship any customer's paid order."""

    def has_permission(self, request, view):
        return bool(request.user and request.user.is_staff and request.user.has_perm("orders.ship_order"))


class OrderShipApi(APIView):
    permission_classes = [ShipPermission]

    class OrderShipInputSerializer(serializers.Serializer):
        carrier = StrictCharField(max_length=100)
        tracking_number = StrictCharField(max_length=100, required=False, allow_blank=True)
        tracking_url = serializers.URLField(max_length=500, required=False, allow_blank=True)
        lines = OrderLineQuantityInputSerializer(
            many=True,
            required=False,
            allow_empty=False,
            max_length=settings.MAX_ORDER_LINES,
            help_text="Omit: every unit left to ship (neither shipped nor refunded).",
        )

    @extend_schema(
        operation_id="orders_ship",
        request=OrderShipInputSerializer,
        description="Ship a paid order's lines, all that is left or some of them now (staff with ship_order). "
        "The order turns partially_shipped, then shipped; the buyer is emailed each shipment.",
        responses={
            200: OrderOutputSerializer,
            400: OpenApiResponse(ErrorSerializer, description="invalid_input (a SKU not in the order), malformed_json"),
            401: UNAUTHENTICATED,
            403: OpenApiResponse(ErrorSerializer, description="permission_denied: not staff with ship_order"),
            404: NOT_FOUND,
            409: OpenApiResponse(
                LinesRefusedSerializer,
                description="order_not_shippable (not paid, or shipped in full); shipment_exceeds_order (lines: "
                "sku, requested, left)",
            ),
        },
    )
    def post(self, request, number: str):
        data = self.OrderShipInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        order = order_find_by_number(number=number)
        if order is None:
            raise NotFound("No such order.")
        lines = data.validated_data.get("lines")
        quantities = None if lines is None else _quantities_by_sku(lines)
        tracking = Tracking(
            carrier=data.validated_data["carrier"],
            number=data.validated_data.get("tracking_number", ""),
            url=data.validated_data.get("tracking_url", ""),
        )
        order_ship(order=order, tracking=tracking, quantities=quantities, actor=request.user)
        return Response(OrderOutputSerializer(order_find_by_number(number=number)).data)


class OrderReturnApi(APIView):
    class ReturnInputSerializer(serializers.Serializer):
        lines = OrderLineQuantityInputSerializer(many=True, allow_empty=False, max_length=settings.MAX_ORDER_LINES)
        reason = StrictCharField(max_length=1000, required=False, allow_blank=True)

    @extend_schema(
        operation_id="orders_return",
        request=ReturnInputSerializer,
        description="Ask to return shipped units of one's own order; staff accept (refund and restock) or refuse, "
        "and the buyer is emailed each step.",
        responses={
            201: ReturnOutputSerializer,
            400: OpenApiResponse(ErrorSerializer, description="invalid_input (a SKU not in the order), malformed_json"),
            401: UNAUTHENTICATED,
            403: CSRF_REFUSED,
            404: NOT_FOUND,
            409: OpenApiResponse(
                LinesRefusedSerializer,
                description="return_not_allowed (lines: sku, requested, left): only units shipped, neither "
                "returned nor refunded, and not asked back already",
            ),
        },
    )
    def post(self, request, number: str):
        data = self.ReturnInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        created = return_request_create(
            order=_order_of(request, number),
            quantities=_quantities_by_sku(data.validated_data["lines"]),
            reason=data.validated_data.get("reason", ""),
        )
        return Response(ReturnOutputSerializer(return_find(pk=created.pk)).data, status=201)


class ReturnDecideApi(APIView):
    """Staff with ``refund_order`` decide a requested return (``decide``: the service that accepts or refuses)."""

    permission_classes = [RefundPermission]
    decide = None

    class ReturnDecisionInputSerializer(serializers.Serializer):
        answer = StrictCharField(max_length=1000, required=False, allow_blank=True, help_text="Emailed to the buyer.")

    def post(self, request, pk: int):
        data = self.ReturnDecisionInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        found = return_find(pk=pk)
        if found is None:
            raise NotFound("No such return.")
        self.decide(return_request=found, actor=request.user, answer=data.validated_data.get("answer", ""))
        return Response(ReturnOutputSerializer(return_find(pk=pk)).data)


def _decide_schema(operation_id: str, description: str, conflict: str):
    return extend_schema_view(
        post=extend_schema(
            operation_id=operation_id,
            description=description,
            request=ReturnDecideApi.ReturnDecisionInputSerializer,
            responses={
                200: ReturnOutputSerializer,
                400: OpenApiResponse(ErrorSerializer, description="invalid_input, malformed_json"),
                401: UNAUTHENTICATED,
                403: OpenApiResponse(ErrorSerializer, description="permission_denied: not staff with refund_order"),
                404: NOT_FOUND,
                409: OpenApiResponse(LinesRefusedSerializer, description=conflict),
                502: OpenApiResponse(
                    ErrorSerializer, description="refund_failed: the provider refused; still requested"
                ),
                503: BUSY,
            },
        )
    )


@_decide_schema(
    "returns_accept",
    "Accept a requested return: its units are refunded (restocked) and the buyer is emailed.",
    "return_already_decided; refund_exceeds_order (lines: those units were refunded meanwhile)",
)
class ReturnAcceptApi(ReturnDecideApi):
    decide = staticmethod(return_request_accept)


@_decide_schema(
    "returns_refuse", "Refuse a requested return; the buyer is emailed the answer.", "return_already_decided"
)
class ReturnRefuseApi(ReturnDecideApi):
    decide = staticmethod(return_request_refuse)


class OrderCancelApi(APIView):
    @extend_schema(
        operation_id="orders_cancel",
        request=None,
        responses={
            200: OrderOutputSerializer,
            401: UNAUTHENTICATED,
            403: CSRF_REFUSED,
            404: NOT_FOUND,
            409: OpenApiResponse(ErrorSerializer, description="order_not_cancellable: it is paid"),
            503: BUSY,
        },
    )
    def post(self, request, number: str):
        return Response(OrderOutputSerializer(order_cancel(order=_order_of(request, number))).data)
