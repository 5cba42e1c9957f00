from django.conf import settings
from django.db.models import prefetch_related_objects
from django.urls import reverse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.exceptions import NotFound, Throttled
from rest_framework.permissions import BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ErrorSerializer, StrictIntegerField
from inventory.apis import InsufficientStockErrorSerializer
from orders.errors import IdempotencyKeyRequired
from orders.selectors import order_find_by_number, order_find_for_customer, order_list_for_customer
from orders.services import order_cancel, order_pay, order_place, order_refund
from orders.throttling import OrderThrottle
from shop.models import SKU_MAX_LENGTH


class OrderLineOutputSerializer(serializers.Serializer):
    sku = serializers.CharField(source="product.sku")
    name = serializers.CharField(source="product.name")
    quantity = serializers.IntegerField()
    unit_price = serializers.DecimalField(max_digits=12, decimal_places=2)
    line_total = serializers.DecimalField(max_digits=14, decimal_places=2)


class OrderOutputSerializer(serializers.Serializer):
    number = serializers.CharField()
    status = serializers.CharField()
    email = serializers.CharField()
    created_at = serializers.DateTimeField()
    expires_at = serializers.DateTimeField()
    paid_at = serializers.DateTimeField(allow_null=True)
    total = serializers.DecimalField(max_digits=14, decimal_places=2)
    lines = OrderLineOutputSerializer(many=True, source="lines.all")

    def to_representation(self, order):
        """What the declared fields render, written out with their own formatting.

        DRF's generic rendering deep-copies every declared field for each serializer it makes, which
        cost an order request more than rendering it; tests/orders/test_api.py holds the two equal.
        """
        fields, line_fields = self._declared_fields, OrderLineOutputSerializer._declared_fields
        money, line_money, time = fields["total"], line_fields["unit_price"], fields["created_at"]
        return {
            "number": str(order.number),
            "status": str(order.status),
            "email": str(order.email),
            "created_at": time.to_representation(order.created_at),
            "expires_at": time.to_representation(order.expires_at),
            "paid_at": None if order.paid_at is None else time.to_representation(order.paid_at),
            "total": money.to_representation(order.total),
            "lines": [
                {
                    "sku": str(line.product.sku),
                    "name": str(line.product.name),
                    "quantity": int(line.quantity),
                    "unit_price": line_money.to_representation(line.unit_price),
                    "line_total": line_fields["line_total"].to_representation(line.line_total),
                }
                for line in order.lines.all()
            ],
        }


class OrderRefusedSerializer(InsufficientStockErrorSerializer):
    """Why an order was not placed (409): short stock, a limit per customer, a sale not open yet."""

    sku = serializers.CharField(required=False)
    limit = serializers.IntegerField(required=False, help_text="limit_exceeded: units one customer may hold")
    held = serializers.IntegerField(required=False, help_text="limit_exceeded: units the customer holds")
    allowed = serializers.IntegerField(required=False, help_text="limit_exceeded: how many more may be ordered")
    starts_at = serializers.DateTimeField(required=False, help_text="sale_not_started: when the sale opens")


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

    def get_queryset(self):
        return order_list_for_customer(customer=self.request.user)

    @classmethod
    def order_request_checked(cls, request) -> tuple[list[dict], str, str]:
        """An order request, counted by the order throttle and checked: its lines, its Idempotency-Key and
        the client address the throttle counted; a refusal is raised."""
        throttle = OrderThrottle(request)
        if not throttle.attempt():
            raise Throttled(wait=throttle.wait())
        key = request.headers.get("Idempotency-Key", "").strip()
        if not 1 <= len(key) <= 64:
            raise IdempotencyKeyRequired()
        data = cls.OrderCreateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return data.validated_data["items"], key, throttle.client_address

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
                "sale_not_started (sku, starts_at)",
            ),
            422: OpenApiResponse(ErrorSerializer, description="idempotency_conflict: key reused with another body"),
            429: OpenApiResponse(
                ErrorSerializer, description="throttled: too many orders from this customer or address; see Retry-After"
            ),
            503: BUSY,
        },
    )
    def post(self, request):
        items, key, client_address = self.order_request_checked(request)
        order = order_place(
            customer=request.user,
            email=request.user.email,
            items=items,
            idempotency_key=key,
            client_address=client_address,
        )
        prefetch_related_objects([order], "lines__product")  # the lines and the total read them once
        return Response(OrderOutputSerializer(order).data, status=status.HTTP_201_CREATED)


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


class RefundPermission(BasePermission):
    """Staff with the ``refund_order`` permission refund any customer's order."""

    def has_permission(self, request, view):
        return bool(request.user and request.user.is_staff and request.user.has_perm("orders.refund_order"))


class OrderRefundApi(APIView):
    permission_classes = [RefundPermission]

    class OrderRefundInputSerializer(serializers.Serializer):
        restock = serializers.BooleanField(help_text="Put the order's units back on hand (ledger: refund_restock).")

    @extend_schema(
        operation_id="orders_refund",
        request=OrderRefundInputSerializer,
        description="Refund a paid order in full through the provider it was paid with (staff with refund_order). "
        "Twice: the same order, refunded once. The order answered is refunded, or still paid while the refund "
        "waits for a busy stock lock: it turns refunded (restocked if asked) when the provider confirms.",
        responses={
            200: OrderOutputSerializer,
            400: OpenApiResponse(ErrorSerializer, description="invalid_input, malformed_json"),
            401: UNAUTHENTICATED,
            403: OpenApiResponse(ErrorSerializer, description="permission_denied: not staff with refund_order"),
            404: NOT_FOUND,
            409: OpenApiResponse(ErrorSerializer, description="order_not_refundable: it is not paid"),
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
        order = order_refund(order=order, restock=data.validated_data["restock"], actor=request.user)
        prefetch_related_objects([order], "lines__product")
        return Response(OrderOutputSerializer(order).data)


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
