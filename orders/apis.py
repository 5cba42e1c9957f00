"""The order API: place, list, show, quote and cancel orders (paying is ``payments.apis``', shipping and
returns ``fulfilment.apis``')."""

from collections.abc import Callable

from django.conf import settings
from django.db.models import prefetch_related_objects
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, serializers, status
from rest_framework.exceptions import NotFound, Throttled
from rest_framework.permissions import BasePermission
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import CSRF_REFUSED, UNAUTHENTICATED, ErrorSerializer, StrictCharField, StrictIntegerField
from core.errors import InvalidInput
from core.throttling import voucher_check_counted
from orders.customers import buyer_of
from orders.errors import IdempotencyKeyRequired
from orders.models import Order
from orders.selectors import order_find_by_number, order_find_for_customer, order_list_for_customer
from orders.serializers import (
    BUSY,
    IDEMPOTENCY_KEY,
    NOT_FOUND,
    BuyerFieldsInputSerializer,
    OrderLineOutputSerializer,
    OrderOutputSerializer,
    OrderRefusedSerializer,
    ShippingMethodOutputSerializer,
    buyer_fields_given,
    money_field,
)
from orders.services import order_cancel, order_place, order_quote
from orders.throttling import OrderThrottle
from shipping.serializers import AddressSerializer
from shop.models import SKU_MAX_LENGTH
from vouchers.errors import VoucherInvalid
from vouchers.models import VOUCHER_CODE_MAX_LENGTH


def order_of(request, number: str):
    """The caller's own order; any other is as good as missing (404)."""
    order = order_find_for_customer(customer=request.user, number=number)
    if order is None:
        raise NotFound("No such order.")
    return order


def staff_with(permission: str) -> type[BasePermission]:
    """Staff holding ``permission`` (``orders.ship_order``, ``orders.refund_order``) act on any customer's order."""

    class StaffWith(BasePermission):
        def has_permission(self, request, view):
            return bool(request.user and request.user.is_staff and request.user.has_perm(permission))

    return StaffWith


class StaffOrderActionApi(APIView):
    """A staff action on any customer's order: the body checked against ``Input``, the order found by its
    number (404), ``act`` run on it, and the order shown as it is then. A subclass names its
    ``permission_classes``, its ``Input`` serializer and ``act``."""

    Input: type[serializers.Serializer]
    act: Callable[[Request, Order, dict], None]  # the subclass's method: the one service call

    def post(self, request, number: str):
        data = self.Input(data=request.data)
        data.is_valid(raise_exception=True)
        order = order_find_by_number(number=number)
        if order is None:
            raise NotFound("No such order.")
        self.act(request, order, data.validated_data)
        return Response(OrderOutputSerializer(order_find_by_number(number=number)).data)


class OrderCollectionApi(generics.ListAPIView):
    """GET lists the caller's orders; POST places one (reserving its stock)."""

    serializer_class = OrderOutputSerializer

    class OrderCreateInputSerializer(BuyerFieldsInputSerializer):
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
            required=False,
            allow_blank=True,
            max_length=VOUCHER_CODE_MAX_LENGTH,
            help_text="A voucher code, in any letter case.",
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
            403: OpenApiResponse(
                ErrorSerializer,
                description="not_admitted (drop, line: the URL to join): a drop's product sells only to the buyers "
                "its line admits, as holds; permission_denied: session auth without a CSRF token",
            ),
            409: OpenApiResponse(
                OrderRefusedSerializer,
                description="insufficient_stock, per SKU; limit_exceeded (sku, limit, held, allowed); "
                "sale_not_started (sku, starts_at); shipping_unavailable (country: no zone covers it); "
                "shipping_method_unavailable (country, methods: the ids that do go); voucher_invalid (voucher, "
                f"reason: {', '.join(VoucherInvalid.REASONS)}): nothing was placed",
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
                given=buyer_fields_given(data),
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
    subtotal = money_field()
    voucher_code = serializers.CharField()
    discount = money_field()
    shipping_price = money_field()
    tax = money_field()
    total = money_field()
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
            403: OpenApiResponse(
                ErrorSerializer,
                description="not_admitted (drop, line: the URL to join): a drop's product sells only to the buyers "
                "its line admits, as holds; permission_denied: session auth without a CSRF token",
            ),
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
        return Response(OrderOutputSerializer(order_of(request, number)).data)


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
        return Response(OrderOutputSerializer(order_cancel(order=order_of(request, number))).data)
