"""Checking out a drop's hold, on the pages and in the API: the pass that names the admitted place is the
buyer's right to the held order (``drops.passes``), so a guest needs no account and no earlier session."""

from django.http import Http404
from django.shortcuts import redirect
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.exceptions import NotFound
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from core.api import ErrorSerializer
from drops import passes
from drops.apis import PASS, PAUSED
from drops.models import DropVariant
from orders.apis import OrderCollectionApi
from orders.checkout import CheckoutSession
from orders.models import Order, OrderLine
from orders.serializers import NOT_FOUND, OrderOutputSerializer, buyer_fields_given
from orders.services import order_hold_checkout
from orders.services.holding import hold_key
from orders.views import checkout_page
from shop.selectors import variant_list_for_catalog


def order_held_for(request, number: str) -> Order | None:
    """The order ``number`` if it is the hold of the place the request's pass names: its idempotency key is
    that place's (``hold_key``), so this reads the database only and works while Redis, and with it the
    line, is down (admitted buyers go on checking out)."""
    entry = DropVariant.objects.filter(variant__in=OrderLine.objects.filter(order__number=number).values("variant_id"))
    drop_id = entry.values_list("drop_id", flat=True).first()
    ticket = passes.pass_of_request(request, drop_id=drop_id) if drop_id is not None else None
    if ticket is None:
        return None
    return Order.objects.filter(number=number, idempotency_key=hold_key(drop_id=drop_id, ticket=ticket)).first()


def hold_checkout(request, number: str):
    """The checkout page of a held order: the address, the method, the voucher; the units are held."""
    order = order_held_for(request, number)
    if order is None:
        raise Http404("No held order for your pass.")
    visitor = CheckoutSession(request)
    if order.status != Order.Status.HELD:  # checked out already: its page, as for any order of this browser
        visitor.remember_order(key=order.idempotency_key, number=order.number)
        return redirect("order-detail", number=number)
    lines = order.lines_with_variants()
    variants = variant_list_for_catalog().filter(pk__in=[line.variant_id for line in lines])
    catalog = {variant.pk: variant for variant in variants}
    shown = [
        {"product": catalog[line.variant_id], "quantity": line.quantity, "total": line.line_total}
        for line in lines
        if line.variant_id in catalog
    ]
    return checkout_page(request, visitor, shown, hold=order)


class HoldCheckoutApi(APIView):
    """POST checks out a drop's held order: where it ships, how, the voucher; then pay it as any order."""

    authentication_classes, permission_classes = [], [AllowAny]  # the pass is the buyer's right to it

    class Input(OrderCollectionApi.OrderCreateInputSerializer):
        items = None  # the hold's

    @extend_schema(
        operation_id="orders_hold_checkout",
        parameters=[PASS],
        request=Input,
        responses={
            200: OrderOutputSerializer,
            400: OpenApiResponse(ErrorSerializer, description="invalid_input (addresses, method)"),
            404: NOT_FOUND,
            409: OpenApiResponse(
                ErrorSerializer,
                description="order_expired: the checkout window lapsed; shipping_unavailable, "
                "shipping_method_unavailable, voucher_invalid: nothing changed",
            ),
            503: PAUSED,
        },
    )
    def post(self, request, number: str):
        data = self.Input(data=request.data)  # malformed input is refused first, as on every endpoint
        data.is_valid(raise_exception=True)
        order = order_held_for(request, number)
        if order is None:
            raise NotFound("No held order for this pass.")
        order = order_hold_checkout(
            order=order,
            shipping_address=data.validated_data.get("shipping_address"),
            billing_address=data.validated_data.get("billing_address"),
            shipping_method=data.validated_data.get("shipping_method"),
            voucher=data.validated_data.get("voucher", ""),
            given=buyer_fields_given(data.validated_data),
        )
        return Response(OrderOutputSerializer(Order.objects.prefetch_related("lines__variant").get(pk=order.pk)).data)
