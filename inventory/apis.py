from django.conf import settings
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, serializers
from rest_framework.exceptions import NotFound
from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ErrorSerializer, StrictIntegerField
from inventory.selectors import stock_find, stock_movement_list
from inventory.services import stock_adjust


class ShortageSerializer(serializers.Serializer):
    sku = serializers.CharField()
    requested = serializers.IntegerField()
    available = serializers.IntegerField()


class InsufficientStockErrorSerializer(ErrorSerializer):
    """The refusal ``insufficient_stock`` (for the schema of the endpoints that reserve stock)."""

    shortages = ShortageSerializer(many=True, required=False)


class StockOutputSerializer(serializers.Serializer):
    sku = serializers.CharField(source="variant.sku")
    on_hand = serializers.IntegerField()
    reserved = serializers.IntegerField()
    available = serializers.IntegerField()
    version = serializers.IntegerField(help_text="Send it back as `version` to refuse stale edits.")
    updated_at = serializers.DateTimeField()


class MovementOutputSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.CharField()
    on_hand_delta = serializers.IntegerField()
    reserved_delta = serializers.IntegerField()
    order = serializers.CharField(source="order.number", allow_null=True, default=None)
    actor = serializers.CharField(source="actor.username", allow_null=True, default=None)
    reason = serializers.CharField()
    created_at = serializers.DateTimeField()


STAFF_ONLY = {
    401: OpenApiResponse(ErrorSerializer, description="not_authenticated"),
    403: OpenApiResponse(ErrorSerializer, description="permission_denied: staff with the stock permissions only"),
    404: OpenApiResponse(ErrorSerializer, description="not_found: no such SKU"),
}


class StockPermission(BasePermission):
    """Staff with the stock model permissions the admin asks for too: view to read, change to edit."""

    def has_permission(self, request, view):
        perm = "inventory.view_stock" if request.method in SAFE_METHODS else "inventory.change_stock"
        return bool(request.user and request.user.is_staff and request.user.has_perm(perm))


def _stock_of(sku: str):
    stock = stock_find(sku=sku)
    if stock is None:
        raise NotFound("No product with this SKU.")
    return stock


class StockDetailApi(APIView):
    permission_classes = [StockPermission]

    class StockUpdateInputSerializer(serializers.Serializer):
        on_hand = StrictIntegerField(required=False, min_value=0, max_value=settings.MAX_STOCK_QUANTITY)
        delta = StrictIntegerField(
            required=False, min_value=-settings.MAX_STOCK_QUANTITY, max_value=settings.MAX_STOCK_QUANTITY
        )
        reason = serializers.CharField(max_length=255)
        version = StrictIntegerField(
            required=False, min_value=0, help_text="Refuse the edit (stale_version) if the stock changed since."
        )

        def validate(self, data):
            if ("on_hand" in data) == ("delta" in data):
                raise serializers.ValidationError({"on_hand": "Give exactly one of on_hand or delta."})
            return data

    @extend_schema(operation_id="inventory_retrieve", responses={200: StockOutputSerializer, **STAFF_ONLY})
    def get(self, request, sku: str):
        return Response(StockOutputSerializer(_stock_of(sku)).data)

    @extend_schema(
        operation_id="inventory_update",
        request=StockUpdateInputSerializer,
        responses={
            200: StockOutputSerializer,
            400: OpenApiResponse(ErrorSerializer, description="invalid_input, invalid_quantity, malformed_json"),
            **STAFF_ONLY,
            409: OpenApiResponse(ErrorSerializer, description="below_reserved, stale_version"),
            503: OpenApiResponse(ErrorSerializer, description="lock_timeout, lock_unavailable; see Retry-After"),
        },
    )
    def patch(self, request, sku: str):
        stock = _stock_of(sku)
        data = self.StockUpdateInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        stock = stock_adjust(
            sku=stock.variant.sku,
            set_to=data.validated_data.get("on_hand"),
            delta=data.validated_data.get("delta"),
            expected_version=data.validated_data.get("version"),
            reason=data.validated_data["reason"],
            actor=request.user,
        )
        return Response(StockOutputSerializer(stock).data)


class StockMovementListApi(generics.ListAPIView):
    permission_classes = [StockPermission]
    serializer_class = MovementOutputSerializer

    def get_queryset(self):
        return stock_movement_list(stock=_stock_of(self.kwargs["sku"]))

    @extend_schema(
        operation_id="inventory_movements",
        responses={
            200: MovementOutputSerializer(many=True),
            400: OpenApiResponse(ErrorSerializer, description="invalid_input: a bad page_size"),
            **STAFF_ONLY,
        },
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)
