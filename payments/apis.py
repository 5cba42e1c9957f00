"""The payment API: start paying for an order, and staff refunds."""

from django.conf import settings
from django.urls import reverse
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import CSRF_REFUSED, UNAUTHENTICATED, ErrorSerializer
from orders.apis import StaffOrderActionApi, order_of, staff_with
from orders.serializers import (
    BUSY,
    NOT_FOUND,
    LinesRefusedSerializer,
    OrderLineQuantityInputSerializer,
    OrderOutputSerializer,
    OrderRefusedSerializer,
    quantities_by_sku,
)
from payments.services import order_pay, order_refund


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
        order = order_of(request, number)
        return_url = request.build_absolute_uri(reverse("order-detail", args=[order.number]))
        return Response(PaymentOutputSerializer(order_pay(order=order, return_url=return_url)).data)


RefundPermission = staff_with("orders.refund_order")


class RefundInputSerializer(serializers.Serializer):
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


@extend_schema_view(
    post=extend_schema(
        operation_id="orders_refund",
        request=RefundInputSerializer,
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
)
class OrderRefundApi(StaffOrderActionApi):
    permission_classes = [RefundPermission]
    Input = RefundInputSerializer

    def act(self, request, order, data: dict) -> None:
        lines, shipping = data.get("lines"), data.get("shipping", False)
        if lines is None and shipping:
            lines = []  # the shipping alone
        order_refund(
            order=order,
            quantities=None if lines is None else quantities_by_sku(lines),
            shipping=shipping,
            restock=data["restock"],
            actor=request.user,
        )
