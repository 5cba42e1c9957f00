from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal
from typing import NamedTuple

from django.db import connection
from django.db.models import BooleanField, Case, ExpressionWrapper, F, Q, QuerySet, When
from django.db.models.functions import Coalesce, Now

from core.db import select_in, select_in_statement
from core.errors import InvalidInput
from shop.errors import ProductUnavailable, SaleNotStarted, UnknownProduct
from shop.models import Product, sku_normalise


class OrderableProduct(NamedTuple):
    """What placing an order needs of a product: its id, its price now and its limit per customer, the
    name its buyer is shown, and what its price and shipping depend on."""

    pk: int
    price: Decimal
    max_per_customer: int | None = None
    name: str = ""
    requires_shipping: bool = True
    weight_grams: int | None = None
    tax_class_id: int | None = None


class ProductForSale(NamedTuple):
    pk: int
    price: Decimal
    for_sale: bool  # active and not deleted
    max_per_customer: int | None
    sale_starts_at: datetime | None
    name: str = ""
    requires_shipping: bool = True
    weight_grams: int | None = None
    tax_class_id: int | None = None
    sale_price: Decimal | None = None
    sale_price_from: datetime | None = None
    sale_price_until: datetime | None = None


def price_in_force(product, *, now: datetime) -> Decimal:
    """What ``product`` costs at ``now``: its sale price inside the sale's window (from its start, before its
    end), else its price. The one place the rule lives; ``product_list_for_catalog`` says it in SQL."""
    if product.sale_price is None:
        return product.price
    if product.sale_price_from is not None and now < product.sale_price_from:
        return product.price
    if product.sale_price_until is not None and now >= product.sale_price_until:
        return product.price
    return product.sale_price


def product_map_orderable(*, skus: Iterable[str], now: datetime) -> dict[str, OrderableProduct]:
    """Products by SKU, refusing unknown SKUs and products that are inactive, deleted or not on sale yet."""
    return products_orderable(product_map_for_sale(skus=skus), skus=skus, now=now)


def product_map_for_sale(*, skus: Iterable[str]) -> dict[str, ProductForSale]:
    """The products these SKUs name, by SKU, and whether each is for sale; unknown SKUs are missing.

    Plain SQL: a lock holder reads this once per batch of orders, every queued buyer waits for it,
    and building the query with the ORM takes more CPU than running it (see the profile in
    docs/benchmarks.md). A caller that sends it with other statements uses ``products_for_sale_statement``.
    """
    skus = sorted(set(skus))
    if not skus:
        return {}
    return products_for_sale_from_rows(select_in(Product, _FOR_SALE_COLUMNS, sku=skus))


_FOR_SALE_COLUMNS = (
    "sku, id, price, is_active, is_deleted, max_per_customer, sale_starts_at, name, requires_shipping, "
    "weight_grams, tax_class_id, sale_price, sale_price_from, sale_price_until"
)


def products_for_sale_statement(*, skus: Iterable[str]) -> tuple[str, list]:
    """``product_map_for_sale``'s statement (at least one SKU), for ``statements_run``; its rows go to
    ``products_for_sale_from_rows``."""
    return select_in_statement(Product, _FOR_SALE_COLUMNS, sku=sorted(set(skus)))


def products_for_sale_from_rows(rows) -> dict[str, ProductForSale]:
    """``product_map_for_sale``'s answer from the rows its statement returned."""
    price = Product._meta.get_field("price")

    def when(value):
        return None if value is None else connection.ops.convert_datetimefield_value(value, None, connection)

    return {
        sku: ProductForSale(
            pk,
            price.to_python(value),
            bool(is_active) and not is_deleted,
            limit,
            when(starts_at),
            name,
            bool(requires_shipping),
            weight,
            tax_class,
            None if sale_price is None else price.to_python(sale_price),
            when(sale_from),
            when(sale_until),
        )
        for (
            sku, pk, value, is_active, is_deleted, limit, starts_at, name, requires_shipping, weight, tax_class,
            sale_price, sale_from, sale_until,
        ) in rows
    }  # fmt: skip


def products_orderable(
    found: dict[str, ProductForSale], *, skus: Iterable[str], now: datetime
) -> dict[str, OrderableProduct]:
    """The ``found`` products of ``skus``, refused if one cannot be ordered at ``now``.

    ``UnknownProduct``, ``ProductUnavailable``, or ``SaleNotStarted`` for the first line whose sale opens later.
    """
    skus = sorted(set(skus))
    unknown = [sku for sku in skus if sku not in found]
    if unknown:
        raise UnknownProduct(skus=unknown)
    unavailable = [sku for sku in skus if not found[sku].for_sale]
    if unavailable:
        raise ProductUnavailable(skus=unavailable)
    for sku in skus:
        if found[sku].sale_starts_at is not None and now < found[sku].sale_starts_at:
            raise SaleNotStarted(sku=sku, starts_at=found[sku].sale_starts_at.isoformat())
    return {
        sku: OrderableProduct(
            found[sku].pk,
            price_in_force(found[sku], now=now),
            found[sku].max_per_customer,
            found[sku].name,
            found[sku].requires_shipping,
            found[sku].weight_grams,
            found[sku].tax_class_id,
        )
        for sku in skus
    }


def product_get_for_stock(*, sku: str) -> Product:
    """A product staff may restock or adjust: any that is not deleted, active or not."""
    try:
        return Product.objects.get(sku=sku)
    except Product.DoesNotExist:
        raise UnknownProduct(skus=[sku]) from None


# ``price_in_force`` in SQL, on the database's clock.
_SALE_PRICE_IN_FORCE = (
    Q(sale_price__isnull=False)
    & (Q(sale_price_from__isnull=True) | Q(sale_price_from__lte=Now()))
    & (Q(sale_price_until__isnull=True) | Q(sale_price_until__gt=Now()))
)


def product_list_for_catalog(
    *, sku: str | None = None, search: str | None = None, in_stock: bool | None = None, ordering: str = "sku"
) -> QuerySet[Product]:
    """Products for sale with their stock counters, filtered and ordered.

    Annotated: ``available`` units; ``sale_open``, whether orders are taken now; ``price_now``, the price
    an order placed now is charged, and ``on_sale``, whether that is the sale price (both on the
    database's clock, as placing an order decides them).
    """
    products = (
        Product.objects.filter(is_active=True)
        .select_related("stock")
        .annotate(
            available=Coalesce(F("stock__on_hand") - F("stock__reserved"), 0),
            sale_open=ExpressionWrapper(
                Q(sale_starts_at__isnull=True) | Q(sale_starts_at__lte=Now()), output_field=BooleanField()
            ),
            on_sale=ExpressionWrapper(_SALE_PRICE_IN_FORCE, output_field=BooleanField()),
            price_now=Case(When(_SALE_PRICE_IN_FORCE, then=F("sale_price")), default=F("price")),
        )
    )
    if sku:
        products = products.filter(sku=sku_normalise(sku))
    if search:
        products = products.filter(name__icontains=search)
    if in_stock is not None:
        products = products.filter(available__gt=0) if in_stock else products.filter(available__lte=0)
    # By price is by the price an order placed now is charged.
    return products.order_by(ordering.replace("price", "price_now"), "sku")


def product_names(*, skus: Iterable[str]) -> dict[str, str]:
    """Products' names by SKU, of those no longer for sale (inactive or deleted) too: a buyer is told by name
    what left the catalog. SKUs are matched in any case."""
    normalised = set()
    for sku in skus:
        try:
            normalised.add(sku_normalise(sku))
        except InvalidInput:
            pass  # no product could have it
    return dict(Product.all_objects.filter(sku__in=sorted(normalised)).values_list("sku", "name"))


def product_find_for_catalog(*, sku: str) -> Product | None:
    """The product for sale with this SKU (in any case); None for a SKU no product has."""
    try:
        sku = sku_normalise(sku)
    except InvalidInput:
        return None  # no product could have it
    return product_list_for_catalog().filter(sku=sku).first()
