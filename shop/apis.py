from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, serializers
from rest_framework.exceptions import NotFound
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ErrorSerializer
from shop.models import SKU_MAX_LENGTH
from shop.selectors import product_find_for_catalog, product_list_for_catalog

ORDERINGS = ["sku", "-sku", "name", "-name", "price", "-price", "available", "-available"]


class ProductOutputSerializer(serializers.Serializer):
    sku = serializers.CharField()
    name = serializers.CharField()
    description = serializers.CharField()
    price = serializers.DecimalField(max_digits=12, decimal_places=2)
    on_hand = serializers.IntegerField(source="stock.on_hand", default=0)
    reserved = serializers.IntegerField(source="stock.reserved", default=0)
    available = serializers.IntegerField()


class ProductListApi(generics.ListAPIView):
    authentication_classes = []  # public: a stale token must not turn the catalog into a 401
    permission_classes = [AllowAny]
    serializer_class = ProductOutputSerializer

    class ProductFilterSerializer(serializers.Serializer):
        # A blank filter means no filter (as in an HTML form).
        sku = serializers.CharField(required=False, allow_blank=True, max_length=SKU_MAX_LENGTH)
        search = serializers.CharField(
            required=False, allow_blank=True, max_length=100, help_text="Part of the product name."
        )
        in_stock = serializers.ChoiceField(
            choices=["true", "false"],
            required=False,
            allow_blank=True,
            help_text="Only products with (or without) stock.",
        )
        ordering = serializers.ChoiceField(choices=ORDERINGS, required=False, allow_blank=True, default="sku")

    @extend_schema(
        operation_id="products_list",
        parameters=[ProductFilterSerializer],
        responses={
            200: ProductOutputSerializer(many=True),
            400: OpenApiResponse(ErrorSerializer, description="invalid_input: a bad filter"),
            404: OpenApiResponse(ErrorSerializer, description="not_found: no such page"),
        },
    )
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)

    def get_queryset(self):
        filters = self.ProductFilterSerializer(data=self.request.query_params)
        filters.is_valid(raise_exception=True)
        data = filters.validated_data
        return product_list_for_catalog(
            sku=data.get("sku"),
            search=data.get("search"),
            in_stock={"true": True, "false": False}.get(data.get("in_stock", "")),
            ordering=data["ordering"] or "sku",
        )


class ProductDetailApi(APIView):
    authentication_classes = []
    permission_classes = [AllowAny]

    @extend_schema(
        operation_id="products_retrieve",
        responses={
            200: ProductOutputSerializer,
            404: OpenApiResponse(ErrorSerializer, description="not_found: no product for sale with this SKU"),
        },
    )
    def get(self, request, sku: str):
        product = product_find_for_catalog(sku=sku)
        if product is None:
            raise NotFound("No product for sale with this SKU.")
        return Response(ProductOutputSerializer(product).data)
