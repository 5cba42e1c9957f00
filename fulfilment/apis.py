"""The after-sales API: staff ship an order's units; buyers ask to return them, staff accept or refuse."""

from django.conf import settings
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_view
from rest_framework import serializers
from rest_framework.exceptions import NotFound
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import CSRF_REFUSED, UNAUTHENTICATED, ErrorSerializer, StrictCharField
from fulfilment.models import (
    CARRIER_MAX_LENGTH,
    RETURN_WORDS_MAX_LENGTH,
    TRACKING_NUMBER_MAX_LENGTH,
    TRACKING_URL_MAX_LENGTH,
)
from fulfilment.selectors import return_find
from fulfilment.services import (
    Tracking,
    order_ship,
    return_request_accept,
    return_request_create,
    return_request_refuse,
)
from orders.apis import StaffOrderActionApi, order_of, staff_with
from orders.serializers import (
    BUSY,
    NOT_FOUND,
    LinesRefusedSerializer,
    OrderLineQuantityInputSerializer,
    OrderOutputSerializer,
    ReturnOutputSerializer,
    quantities_by_sku,
)
from payments.apis import RefundPermission


class ShipInputSerializer(serializers.Serializer):
    carrier = StrictCharField(max_length=CARRIER_MAX_LENGTH)
    tracking_number = StrictCharField(max_length=TRACKING_NUMBER_MAX_LENGTH, required=False, allow_blank=True)
    tracking_url = serializers.URLField(max_length=TRACKING_URL_MAX_LENGTH, required=False, allow_blank=True)
    lines = OrderLineQuantityInputSerializer(
        many=True,
        required=False,
        allow_empty=False,
        max_length=settings.MAX_ORDER_LINES,
        help_text="Omit: every unit left to ship (neither shipped nor refunded).",
    )


@extend_schema_view(
    post=extend_schema(
        operation_id="orders_ship",
        request=ShipInputSerializer,
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
)
class OrderShipApi(StaffOrderActionApi):
    permission_classes = [staff_with("orders.ship_order")]
    Input = ShipInputSerializer

    def act(self, request, order, data: dict) -> None:
        lines = data.get("lines")
        tracking = Tracking(
            carrier=data["carrier"], number=data.get("tracking_number", ""), url=data.get("tracking_url", "")
        )
        order_ship(
            order=order,
            tracking=tracking,
            quantities=None if lines is None else quantities_by_sku(lines),
            actor=request.user,
        )


class OrderReturnApi(APIView):
    class ReturnInputSerializer(serializers.Serializer):
        lines = OrderLineQuantityInputSerializer(many=True, allow_empty=False, max_length=settings.MAX_ORDER_LINES)
        reason = StrictCharField(max_length=RETURN_WORDS_MAX_LENGTH, required=False, allow_blank=True)

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
            order=order_of(request, number),
            quantities=quantities_by_sku(data.validated_data["lines"]),
            reason=data.validated_data.get("reason", ""),
        )
        return Response(ReturnOutputSerializer(return_find(pk=created.pk)).data, status=201)


class ReturnDecideApi(APIView):
    """Staff with ``refund_order`` decide a requested return (``decide``: the service that accepts or refuses)."""

    permission_classes = [RefundPermission]
    decide = None

    class ReturnDecisionInputSerializer(serializers.Serializer):
        answer = StrictCharField(
            max_length=RETURN_WORDS_MAX_LENGTH, required=False, allow_blank=True, help_text="Emailed to the buyer."
        )

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
