"""The baselines ``bench.http_wrk`` drives over HTTP beside our ``POST /api/orders/``; routed by ``bench.http_urls``.

- ``FloorApi``: the DRF floor. The order API's authentication, permission, throttle and middleware, and
  one guarded UPDATE per line (a cart's in one transaction, in primary-key order), answering small JSON.
- ``floor_bare``: the bare floor. A plain Django view, no authentication, the same UPDATEs.
- ``CheckoutPlainApi``: the plain Django checkout behind the order API's authentication and middleware:
  the body validated as the order API does, then ``checkout_plain``, what a Django developer writes.

They live here, not in the apps: no shop code calls them.
"""

import hashlib
import json
from datetime import timedelta
from decimal import Decimal

from django.conf import settings
from django.db import IntegrityError, connection, transaction
from django.db.models import F, prefetch_related_objects
from django.http import JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from rest_framework import status
from rest_framework.exceptions import ParseError, Throttled
from rest_framework.response import Response
from rest_framework.serializers import Serializer
from rest_framework.views import APIView

from inventory.errors import DuplicateLine, InsufficientStock
from inventory.models import Reservation, Stock, StockMovement
from orders.apis import OrderCollectionApi, OrderOutputSerializer
from orders.models import Order, OrderLine
from orders.pricing import tax_of
from orders.throttling import OrderThrottle
from shipping.addresses import address_clean
from shipping.errors import ShippingMethodUnavailable
from shipping.models import ShippingMethod
from shop.errors import UnknownProduct
from shop.models import ProductVariant
from tax.models import TaxRate

# The guarded UPDATE of bench/reserve.py's floor, on the shop's own table.
GUARDED = "UPDATE inventory_stock SET reserved = reserved + 1 WHERE variant_id = %s AND on_hand - reserved >= 1"


def reserve_guarded(*, variant_ids: list[int]) -> bool:
    """One unit of each product, all or nothing: one guarded UPDATE each (several: in one transaction)."""
    if len(variant_ids) == 1:
        with connection.cursor() as cursor:
            cursor.execute(GUARDED, variant_ids)
            return cursor.rowcount == 1
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            for variant_id in sorted(variant_ids):
                cursor.execute(GUARDED, [variant_id])
                if cursor.rowcount != 1:
                    raise _Short
    except _Short:
        return False
    return True


class _Short(Exception):
    """A guarded UPDATE matched no row: roll the cart back."""


def _variant_ids(data) -> list[int]:
    """The floors' body: ``{"items": [{"variant_id": 1, "quantity": 1}, ...]}`` (one unit each)."""
    try:
        return [int(item["variant_id"]) for item in data["items"]]
    except (KeyError, TypeError, ValueError):
        raise ParseError("Give items with a variant_id each.") from None


class FloorApi(APIView):
    """The DRF floor: authenticated, permitted and throttled as ``POST /api/orders/``, then the guarded UPDATEs."""

    def post(self, request):
        throttle = OrderThrottle(request)
        if not throttle.attempt():
            raise Throttled(wait=throttle.wait())
        variant_ids = _variant_ids(request.data)
        if not reserve_guarded(variant_ids=variant_ids):
            return Response({"code": "insufficient_stock"}, status=status.HTTP_409_CONFLICT)
        return Response({"reserved": len(variant_ids)}, status=status.HTTP_201_CREATED)


@csrf_exempt
@require_POST
def floor_bare(request):
    """The bare floor: a plain Django view, no authentication, the same guarded UPDATEs."""
    try:
        variant_ids = _variant_ids(json.loads(request.body))
    except (ValueError, ParseError):
        return JsonResponse({"code": "malformed"}, status=400)
    if not reserve_guarded(variant_ids=variant_ids):
        return JsonResponse({"code": "insufficient_stock"}, status=409)
    return JsonResponse({"reserved": len(variant_ids)}, status=201)


class PlainOrderOutputSerializer(OrderOutputSerializer):
    """The order API's output fields, rendered by DRF's generic ``to_representation``, as a Django
    developer's serializer renders them (the shop's own writes them out: ``OrderOutputSerializer``)."""

    to_representation = Serializer.to_representation


def checkout_plain(
    *,
    customer,
    items: list[dict],
    idempotency_key: str,
    shipping_address: dict,
    shipping_method: int,
    client_address: str = "",
) -> Order:
    """A checkout as a Django developer writes it (roughly Saleor's): the address checked, the shipping
    method and tax rates read, one transaction, the stock rows locked in primary-key order, checked,
    ``F()`` updates, then the order with its address and totals, its lines with their tax, and the
    reservation and ledger rows ``order_place`` writes, through the ORM on the shop's tables. Every
    product is shipped (the benches' are).

    A retry with the same key (the unique constraint refuses it) answers the order placed first.
    """
    wanted = {item["sku"]: item["quantity"] for item in items}
    if len(wanted) != len(items):
        skus = [item["sku"] for item in items]
        raise DuplicateLine(skus=sorted({sku for sku in skus if skus.count(sku) > 1}))
    address = address_clean(shipping_address)
    variants = {variant.sku: variant for variant in ProductVariant.objects.filter(sku__in=wanted, is_active=True)}
    if unknown := sorted(set(wanted) - set(variants)):
        raise UnknownProduct(skus=unknown)
    method = ShippingMethod.objects.select_related("zone").filter(pk=shipping_method, is_active=True).first()
    if method is None or address["country"] not in method.zone.countries:
        raise ShippingMethodUnavailable(country=address["country"], methods=[])
    rates = {rate.tax_class_id: rate.rate for rate in TaxRate.objects.filter(country=address["country"])}
    totals = _plain_totals(variants, wanted, method, rates)
    quantities = {variants[sku].pk: quantity for sku, quantity in wanted.items()}
    scope = f"user:{customer.pk}"
    key_hash = hashlib.sha256(idempotency_key.encode()).hexdigest()
    expires_at = timezone.now() + timedelta(seconds=settings.RESERVATION_TTL_SECONDS)
    try:
        with transaction.atomic():
            stocks = list(Stock.objects.select_for_update().filter(variant_id__in=quantities).order_by("pk"))
            short = [stock for stock in stocks if stock.available < quantities[stock.variant_id]]
            if short or len(stocks) != len(quantities):
                skus = {variant.pk: sku for sku, variant in variants.items()}
                raise InsufficientStock(
                    shortages=[
                        {
                            "sku": skus[stock.variant_id],
                            "requested": quantities[stock.variant_id],
                            "available": max(stock.available, 0),
                        }
                        for stock in short
                    ]
                )
            for stock in stocks:
                Stock.objects.filter(pk=stock.pk).update(
                    reserved=F("reserved") + quantities[stock.variant_id], version=F("version") + 1
                )
            order = Order.objects.create(
                customer=customer,
                shipping_address=address,
                shipping_method=method,
                shipping_method_name=method.name,
                **totals["order"],
                email=customer.email,
                buyer=scope,
                client_address=client_address,
                expires_at=expires_at,
                idempotency_key=idempotency_key,
                idempotency_key_hash=key_hash,
                idempotency_scope=scope,
                request_fingerprint=hashlib.sha256(json.dumps(sorted(wanted.items())).encode()).hexdigest(),
            )
            lines = OrderLine.objects.bulk_create(
                OrderLine(
                    order=order,
                    variant=variants[sku],
                    quantity=quantity,
                    unit_price=variants[sku].price,
                    **totals["lines"][sku],
                )
                for sku, quantity in wanted.items()
            )
            reservations = Reservation.objects.bulk_create(
                Reservation(order_line=line, variant_id=line.variant_id, quantity=line.quantity, expires_at=expires_at)
                for line in lines
            )
            by_variant = {stock.variant_id: stock for stock in stocks}
            StockMovement.objects.bulk_create(
                StockMovement(
                    stock=by_variant[reservation.variant_id],
                    kind=StockMovement.Kind.RESERVE,
                    reserved_delta=reservation.quantity,
                    order=order,
                    reservation=reservation,
                )
                for reservation in reservations
            )
    except IntegrityError:
        existing = Order.objects.filter(idempotency_scope=scope, idempotency_key_hash=key_hash).first()
        if existing is None:
            raise
        return existing
    return order


def _plain_totals(variants: dict, wanted: dict, method, rates: dict) -> dict:
    """The order's and each line's figures, by the shop's rounding rule (``orders.pricing.tax_of``)."""
    currency, included = settings.SHOP_CURRENCY, settings.PRICES_INCLUDE_TAX
    lines, subtotal, tax = {}, Decimal(0), Decimal(0)
    for sku, quantity in wanted.items():
        variant = variants[sku]
        rate = rates.get(variant.tax_class_id, rates.get(None, Decimal(0)))
        line_total = variant.price * quantity
        line_tax = tax_of(line_total, rate, included=included, currency=currency)
        lines[sku] = {"line_total": line_total, "tax_rate": rate, "tax": line_tax}
        subtotal, tax = subtotal + line_total, tax + line_tax
    shipping = Decimal(0) if method.free_above is not None and subtotal >= method.free_above else method.price
    shipping_rate = rates.get(None, Decimal(0)) if settings.SHIPPING_TAXED else Decimal(0)
    shipping_tax = tax_of(shipping, shipping_rate, included=included, currency=currency)
    tax += shipping_tax
    order = {
        "currency": currency,
        "prices_include_tax": included,
        "subtotal": subtotal,
        "shipping_price": shipping,
        "shipping_tax_rate": shipping_rate,
        "shipping_tax": shipping_tax,
        "tax": tax,
        "total": subtotal + shipping + (0 if included else tax),
    }
    return {"order": order, "lines": lines}


class CheckoutPlainApi(APIView):
    """The plain checkout over HTTP: the order API's authentication, throttle, header and body checks and answer."""

    def post(self, request):
        data, key, client_address = OrderCollectionApi.order_request_checked(request)
        order = checkout_plain(
            customer=request.user,
            items=data["items"],
            idempotency_key=key,
            shipping_address=data.get("shipping_address"),
            shipping_method=data.get("shipping_method"),
            client_address=client_address,
        )
        prefetch_related_objects([order], "lines__variant")
        return Response(PlainOrderOutputSerializer(order).data, status=status.HTTP_201_CREATED)
