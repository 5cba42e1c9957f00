from django.conf import settings
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import generics, serializers
from rest_framework.exceptions import NotFound
from rest_framework.permissions import AllowAny, BasePermission
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ErrorSerializer, QueryIntegerField, StrictDecimalField, StrictIntegerField
from shop.models import SKU_MAX_LENGTH, Category, OptionValue
from shop.selectors import variant_find_for_catalog, variant_list_for_catalog
from shop.services import variant_sale_terms_set

ORDERINGS = ["sku", "-sku", "name", "-name", "price", "-price", "available", "-available", "newest"]


class ProductSummarySerializer(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    category = serializers.CharField(source="category.slug", allow_null=True, help_text="Its main category's slug.")


class ProductOutputSerializer(serializers.Serializer):
    """One variant (one SKU, the unit of stock) with the product it belongs to."""

    sku = serializers.CharField()
    name = serializers.CharField(help_text="The product's name with the variant's option values.")
    product = ProductSummarySerializer()
    options = serializers.SerializerMethodField(help_text='The variant\'s option values: {"Size": "42"}.')
    description = serializers.CharField(source="product.description")
    price = serializers.DecimalField(max_digits=12, decimal_places=2, help_text="The regular price.")
    price_now = serializers.DecimalField(
        max_digits=12, decimal_places=2, help_text="What an order placed now is charged: the sale price in its window."
    )
    on_sale = serializers.BooleanField(help_text="price_now is the sale price.")
    sale_price = serializers.DecimalField(max_digits=12, decimal_places=2, allow_null=True)
    sale_price_from = serializers.DateTimeField(allow_null=True, help_text="Null: from when it was set.")
    sale_price_until = serializers.DateTimeField(allow_null=True, help_text="Null: until it is removed.")
    on_hand = serializers.IntegerField(source="stock.on_hand", default=0)
    reserved = serializers.IntegerField(source="stock.reserved", default=0)
    available = serializers.IntegerField()
    sold_out = serializers.SerializerMethodField(help_text="No unit is available (the pages say 'Sold out').")
    sale_open = serializers.BooleanField(help_text="Orders are taken now; before sale_starts_at they are refused.")
    sale_starts_at = serializers.DateTimeField(allow_null=True)
    max_per_customer = serializers.IntegerField(
        allow_null=True, help_text="Units one customer may hold across unpaid and paid orders; null: no limit."
    )

    def get_options(self, variant) -> dict[str, str]:
        return {value.option.name: value.value for value in variant.option_values.all()}

    def get_sold_out(self, variant) -> bool:
        return variant.available <= 0


class ProductPermission(BasePermission):
    """Anyone reads the catalog; staff with the admin's change permission edit a product's terms of sale.

    Methods the view lacks pass, to be answered 405 like everywhere else.
    """

    def has_permission(self, request, view):
        if request.method != "PATCH":
            return True
        return bool(request.user and request.user.is_staff and request.user.has_perm("shop.change_productvariant"))


class ProductListApi(generics.ListAPIView):
    authentication_classes = []  # public: a stale token must not turn the catalog into a 401
    permission_classes = [AllowAny]
    serializer_class = ProductOutputSerializer

    class ProductFilterSerializer(serializers.Serializer):
        # A blank filter means no filter (as in an HTML form).
        sku = serializers.CharField(required=False, allow_blank=True, max_length=SKU_MAX_LENGTH)
        search = serializers.CharField(
            required=False,
            allow_blank=True,
            max_length=100,
            help_text="Words the product name has (each may be the start of a word), or the start of a SKU.",
        )
        product = QueryIntegerField(
            required=False, min_value=1, help_text="A product's id: its variants (a product page's picker)."
        )
        category = serializers.SlugField(
            required=False, allow_blank=True, help_text="A category's slug: its products and its subcategories'."
        )
        in_stock = serializers.ChoiceField(
            choices=["true", "false"],
            required=False,
            allow_blank=True,
            help_text="Only products with (or without) stock.",
        )
        price_min = StrictDecimalField(
            max_digits=12, decimal_places=2, min_value=0, required=False, help_text="Least price now."
        )
        price_max = StrictDecimalField(
            max_digits=12, decimal_places=2, min_value=0, required=False, help_text="Greatest price now."
        )
        option = serializers.ListField(
            child=serializers.CharField(max_length=101),
            required=False,
            max_length=10,
            help_text="Option values, as Name:value (repeat it: option=Size:42&option=Colour:Black); values of one "
            "option are alternatives.",
        )
        ordering = serializers.ChoiceField(choices=ORDERINGS, required=False, allow_blank=True, default="sku")

        def validate_category(self, slug):
            if not slug:
                return None
            category = Category.objects.filter(slug=slug).first()
            if category is None:
                raise serializers.ValidationError("No category has this slug.")
            return category

        def validate_option(self, pairs):
            values = []
            for pair in pairs:
                name, _, value = pair.partition(":")
                found = OptionValue.objects.filter(option__name__iexact=name.strip(), value__iexact=value.strip())
                if not value or not found.exists():
                    raise serializers.ValidationError(f"No option value {pair!r}; give Name:value, e.g. Size:42.")
                values.extend(found)
            return values

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
        query = self.request.query_params
        filters = self.ProductFilterSerializer(data={**query.dict(), "option": query.getlist("option")})
        filters.is_valid(raise_exception=True)
        data = filters.validated_data
        return variant_list_for_catalog(
            sku=data.get("sku"),
            product_id=data.get("product"),
            search=data.get("search"),
            category=data.get("category"),
            in_stock={"true": True, "false": False}.get(data.get("in_stock", "")),
            price_min=data.get("price_min"),
            price_max=data.get("price_max"),
            option_values=data.get("option", ()),
            ordering=data["ordering"] or "sku",
        )


class ProductDetailApi(APIView):
    permission_classes = [ProductPermission]

    class ProductSaleTermsInputSerializer(serializers.Serializer):
        max_per_customer = StrictIntegerField(
            required=False, allow_null=True, min_value=1, max_value=settings.MAX_STOCK_QUANTITY
        )
        sale_starts_at = serializers.DateTimeField(required=False, allow_null=True)
        sale_price = StrictDecimalField(
            max_digits=12, decimal_places=2, min_value=0, required=False, allow_null=True, coerce_to_string=False
        )
        sale_price_from = serializers.DateTimeField(required=False, allow_null=True)
        sale_price_until = serializers.DateTimeField(required=False, allow_null=True)

        def validate(self, data):
            if not data:
                raise serializers.ValidationError({"non_field_errors": f"Give one of {', '.join(self.fields)}."})
            return data

    def initialize_request(self, request, *args, **kwargs):
        # Only editing authenticates: a stale token must not turn the catalog into a 401.
        self.editing = request.method == "PATCH"
        return super().initialize_request(request, *args, **kwargs)

    def get_authenticators(self):
        return super().get_authenticators() if self.editing else []

    @extend_schema(
        operation_id="products_retrieve",
        responses={
            200: ProductOutputSerializer,
            404: OpenApiResponse(ErrorSerializer, description="not_found: no product for sale with this SKU"),
        },
    )
    def get(self, request, sku: str):
        return Response(ProductOutputSerializer(_variant_of(sku)).data)

    @extend_schema(
        operation_id="products_update",
        request=ProductSaleTermsInputSerializer,
        responses={
            200: ProductOutputSerializer,
            400: OpenApiResponse(ErrorSerializer, description="invalid_input, malformed_json"),
            401: OpenApiResponse(ErrorSerializer, description="not_authenticated, authentication_failed"),
            403: OpenApiResponse(
                ErrorSerializer, description="permission_denied: staff with change_productvariant only"
            ),
            404: OpenApiResponse(ErrorSerializer, description="not_found: no product for sale with this SKU"),
        },
    )
    def patch(self, request, sku: str):
        variant = _variant_of(sku)
        data = self.ProductSaleTermsInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        variant_sale_terms_set(variant=variant, **data.validated_data)
        return Response(ProductOutputSerializer(_variant_of(sku)).data)


def _variant_of(sku: str):
    variant = variant_find_for_catalog(sku=sku)
    if variant is None:
        raise NotFound("No product for sale with this SKU.")
    return variant
