from collections.abc import Iterable
from datetime import datetime
from decimal import Decimal
from typing import NamedTuple

from django.db import connection
from django.db.models import (
    BooleanField,
    Case,
    Exists,
    ExpressionWrapper,
    F,
    OuterRef,
    Prefetch,
    Q,
    QuerySet,
    Subquery,
    Sum,
    When,
)
from django.db.models.functions import Coalesce, Now

from core.db import decimal_from_db, select_in, select_in_statement
from core.errors import InvalidInput
from shop.errors import ProductUnavailable, SaleNotStarted, UnknownProduct
from shop.models import SKU_MAX_LENGTH, Category, OptionValue, Product, ProductImage, ProductVariant, sku_normalise


class OrderableVariant(NamedTuple):
    """What placing an order needs of a variant: its id, its price now and its limit per customer, the
    name its buyer is shown, and what its price and shipping depend on."""

    pk: int
    price: Decimal
    max_per_customer: int | None = None
    name: str = ""
    requires_shipping: bool = True
    weight_grams: int | None = None
    tax_class_id: int | None = None


class VariantForSale(NamedTuple):
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


def price_in_force(variant, *, now: datetime) -> Decimal:
    """What ``product`` costs at ``now``: its sale price inside the sale's window (from its start, before its
    end), else its price. The one place the rule lives; ``variant_list_for_catalog`` says it in SQL."""
    if variant.sale_price is None:
        return variant.price
    if variant.sale_price_from is not None and now < variant.sale_price_from:
        return variant.price
    if variant.sale_price_until is not None and now >= variant.sale_price_until:
        return variant.price
    return variant.sale_price


def variant_map_orderable(*, skus: Iterable[str], now: datetime) -> dict[str, OrderableVariant]:
    """Variants by SKU, refusing unknown SKUs and variants that are inactive, deleted or not on sale yet."""
    return variants_orderable(variant_map_for_sale(skus=skus), skus=skus, now=now)


def variant_map_for_sale(*, skus: Iterable[str]) -> dict[str, VariantForSale]:
    """The variants these SKUs name, by SKU, and whether each is for sale; unknown SKUs are missing.

    Plain SQL: a lock holder reads this once per batch of orders, every queued buyer waits for it,
    and building the query with the ORM takes more CPU than running it (see the profile in
    docs/benchmarks.md). A caller that sends it with other statements uses ``variants_for_sale_statement``.
    """
    skus = sorted(set(skus))
    if not skus:
        return {}
    return variants_for_sale_from_rows(select_in(ProductVariant, _FOR_SALE_COLUMNS, sku=skus))


_FOR_SALE_COLUMNS = (
    "sku, id, price, is_active, is_deleted, max_per_customer, sale_starts_at, name, requires_shipping, "
    "weight_grams, tax_class_id, sale_price, sale_price_from, sale_price_until"
)


def variants_for_sale_statement(*, skus: Iterable[str]) -> tuple[str, list]:
    """``variant_map_for_sale``'s statement (at least one SKU), for ``statements_run``; its rows go to
    ``variants_for_sale_from_rows``."""
    return select_in_statement(ProductVariant, _FOR_SALE_COLUMNS, sku=sorted(set(skus)))


def variants_for_sale_from_rows(rows) -> dict[str, VariantForSale]:
    """``variant_map_for_sale``'s answer from the rows its statement returned."""
    price = ProductVariant._meta.get_field("price")

    def when(value):
        return None if value is None else connection.ops.convert_datetimefield_value(value, None, connection)

    return {
        sku: VariantForSale(
            pk,
            decimal_from_db(price, value),
            bool(is_active) and not is_deleted,
            limit,
            when(starts_at),
            name,
            bool(requires_shipping),
            weight,
            tax_class,
            decimal_from_db(price, sale_price),
            when(sale_from),
            when(sale_until),
        )
        for (
            sku, pk, value, is_active, is_deleted, limit, starts_at, name, requires_shipping, weight, tax_class,
            sale_price, sale_from, sale_until,
        ) in rows
    }  # fmt: skip


def variants_orderable(
    found: dict[str, VariantForSale], *, skus: Iterable[str], now: datetime
) -> dict[str, OrderableVariant]:
    """The ``found`` variants of ``skus``, refused if one cannot be ordered at ``now``.

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
        sku: OrderableVariant(
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


def variant_get_for_stock(*, sku: str) -> ProductVariant:
    """A variant staff may restock or adjust: any that is not deleted, active or not."""
    try:
        return ProductVariant.objects.get(sku=sku)
    except ProductVariant.DoesNotExist:
        raise UnknownProduct(skus=[sku]) from None


# ``price_in_force`` in SQL, on the database's clock.
_SALE_PRICE_IN_FORCE = (
    Q(sale_price__isnull=False)
    & (Q(sale_price_from__isnull=True) | Q(sale_price_from__lte=Now()))
    & (Q(sale_price_until__isnull=True) | Q(sale_price_until__gt=Now()))
)


def variant_list_for_catalog(
    *,
    sku: str | None = None,
    product_id: int | None = None,
    search: str | None = None,
    category: Category | None = None,
    in_stock: bool | None = None,
    price_min: Decimal | None = None,
    price_max: Decimal | None = None,
    option_values: Iterable[OptionValue] = (),
    ordering: str = "sku",
) -> QuerySet[ProductVariant]:
    """Variants for sale with their stock counters, filtered and ordered.

    Filters: the SKU; the product; a search (``product_ids_matching``); the category's subtree; in stock; the price now
    within a range; every chosen option value (values of one option are alternatives: size 42 or 43, in
    black). Annotated: ``available`` units; ``sale_open``, whether orders are taken now; ``price_now``, the
    price an order placed now is charged, and ``on_sale``, whether that is the sale price (both on the
    database's clock, as placing an order decides them).
    """
    variants = (
        ProductVariant.objects.filter(is_active=True, product__is_deleted=False)
        .select_related("stock", "product__category")
        .prefetch_related("option_values__option")
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
        variants = variants.filter(sku=sku_normalise(sku))
    if product_id is not None:
        variants = variants.filter(product_id=product_id)
    if search:
        variants = variants.filter(product_id__in=product_ids_matching(search))
    if category is not None:
        variants = variants.filter(product__category__path__startswith=category.path)
    if in_stock is not None:
        variants = variants.filter(available__gt=0) if in_stock else variants.filter(available__lte=0)
    if price_min is not None:
        variants = variants.filter(price_now__gte=price_min)
    if price_max is not None:
        variants = variants.filter(price_now__lte=price_max)
    by_option: dict[int, list[int]] = {}
    for value in option_values:
        by_option.setdefault(value.option_id, []).append(value.pk)
    for value_ids in by_option.values():
        having = ProductVariant.option_values.through.objects.filter(
            productvariant_id=OuterRef("pk"), optionvalue_id__in=value_ids
        )
        variants = variants.filter(Exists(having))
    # By price is by the price an order placed now is charged.
    ordering = {"newest": "-created_at", "-newest": "created_at"}.get(ordering, ordering.replace("price", "price_now"))
    return variants.order_by(ordering, "sku")


def variant_names(*, skus: Iterable[str]) -> dict[str, str]:
    """Variants' names by SKU, of those no longer for sale (inactive or deleted) too: a buyer is told by name
    what left the catalog. SKUs are matched in any case."""
    normalised = set()
    for sku in skus:
        try:
            normalised.add(sku_normalise(sku))
        except InvalidInput:
            pass  # no product could have it
    return dict(ProductVariant.all_objects.filter(sku__in=sorted(normalised)).values_list("sku", "name"))


def variant_find_for_catalog(*, sku: str) -> ProductVariant | None:
    """The variant for sale with this SKU (in any case); None for a SKU no variant has."""
    try:
        sku = sku_normalise(sku)
    except InvalidInput:
        return None  # no product could have it
    return variant_list_for_catalog().filter(sku=sku).first()


PRODUCT_ORDERINGS = {"name": ["name", "id"], "price": ["price_from", "id"], "-price": ["-price_from", "id"],
                     "newest": ["-created_at", "-id"]}  # fmt: skip
SEARCH_MATCHES_MAX = 1000


def product_list_for_catalog(*, ordering: str = "name", **filters) -> QuerySet[Product]:
    """Products with a variant for sale that passes ``filters`` (those of ``variant_list_for_catalog``), for
    the catalog and category pages. Annotated: ``price_from``, the least such variant's price now;
    ``available``, their units; prefetched: ``for_sale``, those variants, and ``pictures``, its images.
    """
    variants = variant_list_for_catalog(**filters)
    of_product = variants.filter(product_id=OuterRef("pk")).order_by()
    products = (
        Product.objects.filter(Exists(of_product))
        .select_related("category")
        .annotate(
            price_from=Subquery(of_product.order_by("price_now").values("price_now")[:1]),
            available=Subquery(of_product.values("product_id").annotate(units=Sum("available")).values("units")[:1]),
        )
        .prefetch_related(
            Prefetch("variants", queryset=variants.order_by("sku"), to_attr="for_sale"),
            Prefetch("images", queryset=ProductImage.objects.order_by("position", "id"), to_attr="pictures"),
        )
    )
    return products.order_by(*PRODUCT_ORDERINGS.get(ordering, PRODUCT_ORDERINGS["name"]))


def product_ids_matching(search: str) -> list[int]:
    """Ids of the products whose name has every word of ``search`` (a word's start matches: "sneak" finds
    "sneakers"), or one of whose variants' SKUs starts with it; at most ``SEARCH_MATCHES_MAX``."""
    ids = set()
    for queryset in product_search_queries(search):
        ids.update(queryset[:SEARCH_MATCHES_MAX])
    return sorted(ids)[:SEARCH_MATCHES_MAX]


def product_search_queries(search: str) -> list[QuerySet]:
    """``product_ids_matching``'s queries, each on an index: MariaDB's FULLTEXT index on product names (SQLite,
    the embedded mode's database, scans), and the unique index on SKUs by prefix."""
    words = [word for word in "".join(c if c.isalnum() else " " for c in search).split() if len(word) >= 2][:8]
    queries = []
    if words and connection.vendor == "mysql":
        terms = " ".join(f"+{word}*" for word in words)
        # A plain MATCH in WHERE, which MariaDB answers from the FULLTEXT index (no ORM lookup says it).
        by_name = Product.objects.extra(where=["MATCH(name) AGAINST (%s IN BOOLEAN MODE)"], params=[terms])
        queries.append(by_name.values_list("pk", flat=True))
    elif words:
        by_name = Product.objects.all()
        for word in words:
            by_name = by_name.filter(name__icontains=word)
        queries.append(by_name.values_list("pk", flat=True))
    sku = search.strip().upper()
    if sku and len(sku) <= SKU_MAX_LENGTH:
        queries.append(ProductVariant.objects.filter(sku__istartswith=sku).values_list("product_id", flat=True))
    return queries


class PickerChoice(NamedTuple):
    value: str
    sku: str | None  # the variant picking it leads to; None: no such combination
    sold_out: bool
    current: bool


def variant_picker(current: ProductVariant, siblings: list[ProductVariant]) -> list[tuple[str, list[PickerChoice]]]:
    """The product page's buttons: per option, each value, leading to the variant that has it with the
    current variant's other values (sold out ones shown, to be disabled). Variants come annotated with
    ``available`` and prefetched option values, as ``variant_list_for_catalog`` gives them."""
    values_of = {variant.pk: {value.option: value for value in variant.option_values.all()} for variant in siblings}
    mine = values_of.get(current.pk, {})
    options = sorted({option for values in values_of.values() for option in values}, key=lambda o: o.name)
    rows = []
    for option in options:
        values = sorted({v[option] for v in values_of.values() if option in v}, key=lambda v: (v.position, v.value))
        choices = []
        for value in values:
            wanted = {**mine, option: value}
            target = next((v for v in siblings if values_of[v.pk] == wanted), None)
            sold_out = target is not None and (target.available <= 0 or not target.sale_open)
            choices.append(PickerChoice(value.value, target and target.sku, sold_out, value == mine.get(option)))
        rows.append((option.name, choices))
    return rows
