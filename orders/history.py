"""A made-up order history written straight into the tables, to measure the shop at scale (``manage.py seed_history``).

Orders of the past year in every status, with their lines, reservations, ledger rows, payments,
shipments, refunds and the records of the emails sent, each as the services leave them: one
reservation per line, whose state follows the order's status; a ``reserve`` ledger row per
reservation, then its ``commit`` row (paid, shipped, refunded) or its ``release`` row with the reason
(cancelled, expired, payment failed); paid orders with their captured payment, shipped ones with a
shipment, refunded ones refunded in full without restocking. The stock the orders take arrives first,
through ``restock`` ledger rows, and the counters move by the sums written, so ``reconcile`` finds the
books balanced. Orders are priced by ``orders.pricing``'s rule at the shop's tax rates, shipped to
``SHOP_COUNTRY`` by its cheapest method (one is made if none goes there). Last come the orders awaiting
payment: placed within the past half of the reservation's lifetime, or overdue (expired within the past
hour).

Loaded a chunk of orders per transaction, each table's rows as one tab-separated text (``LOAD DATA LOCAL
INFILE``: the server parses it faster than the same rows as INSERTs), with every id chosen here, above
the largest stored, so that rows name each other without reading anything back. Every value in the text
is made here (numbers, timestamps, choices' values, text from fixed alphabets); text from the database or
the settings is escaped once, at setup. Writer threads load chunks, each on a connection of its own,
while the next chunk is built; those connections check no foreign keys (every id is one this run chose),
and a load that skips or alters a row (with LOCAL the server only warns) fails its chunk. Nothing makes
the server read an index page per row once the tables outgrow its memory: order numbers rise with the
ids, and the unique index of the idempotency keys, whose hashes are random, is built again at the end.

For MySQL/MariaDB (``local_infile`` on), on a database no one else writes to meanwhile. Interrupted, it
leaves whole chunks of orders with their ledger rows, and counters not yet moved: ``reconcile --fix``
sets them from the ledger.
"""

import hashlib
import json
import math
import os
import queue
import random
import tempfile
import time
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import NamedTuple

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.core.exceptions import FieldDoesNotExist
from django.db import connection, models, transaction
from django.db.models import Max
from django.utils import timezone

from core.db import MissingColumns, insert_defaults, statements_run
from fulfilment.models import Shipment, ShipmentLine
from inventory.models import Reservation, Stock, StockMovement
from orders.customers import email_canonical
from orders.models import PAID_STATUSES, Order, OrderEmail, OrderLine
from orders.pricing import tax_of
from payments.models import Payment, Refund, RefundLine
from shipping.models import ShippingMethod, ShippingZone
from shipping.selectors import (
    ShippingOffer,
    shipping_methods_from_rows,
    shipping_methods_statement,
    shipping_offers_for,
)
from shop.models import Product, ProductVariant
from tax.selectors import tax_rates_from_rows, tax_rates_statement

SKU_PREFIX = "HIST-"  # the history's SKUs: HIST-000001 and on
CUSTOMER_PREFIX = "history-customer-"  # its customers' usernames
MAX_ORDERS = 100_000_000
MAX_SKUS = 100_000
MARK = "seed_history"  # the reason of its restock rows, and the request fingerprint of its orders
IDEMPOTENCY_UNIQUE = "order_idempotency_key_per_customer"

Status = Order.Status
CAPTURED = (*PAID_STATUSES, Status.REFUNDED)  # the statuses of orders whose payment was applied
# Of every hundred orders of the past year, how many end in each status.
STATUS_SHARES = {
    Status.SHIPPED: 50,
    Status.PAID: 8,
    Status.PARTIALLY_SHIPPED: 3,
    Status.REFUNDED: 3,
    Status.EXPIRED: 20,
    Status.CANCELLED: 10,
    Status.PAYMENT_FAILED: 6,
}
AWAITING_PER_ORDERS = 100  # one order in this many awaits payment (at least the overdue ones asked for)
AWAITING_PER_OVERDUE = 10  # unless told, one order awaiting payment in this many is overdue
GUEST_SHARE = 0.3  # of the orders, placed by guests; the rest by customers with accounts
ORDERS_PER_CUSTOMER = 5_000
# A buyer's newest order ends the buyer's range in the orders' indexes by buyer, customer and client
# address, so the load keeps a page per buyer in the server's memory: a few thousand buyers at most, and
# fewer client addresses.
MAX_CUSTOMERS = 2_000
CLIENT_ADDRESSES = 250  # 10.0.0.1 on
LINE_COUNTS = (1, 1, 1, 1, 1, 2, 2, 2, 3, 3)  # lines of an order, drawn evenly from these
QUANTITIES = (1, 1, 1, 1, 1, 1, 1, 2, 2, 3)  # units of a line, drawn evenly from these

ORDERS_PER_CHUNK = 5_000
WRITERS = 2  # chunks loaded at once, each by a connection of its own: the server parses on as many cores
RESTOCK_LOT = 100  # a restock brings the units a chunk's orders keep, rounded up to whole lots
CARRIER = "DHL"

SECOND = 1_000_000  # the history's clock counts microseconds since the epoch
DAY = 86_400 * SECOND
HISTORY_DAYS = 365
OVERDUE_WINDOW = 3600 * SECOND  # the overdue orders expired within this long before they are written
EMAIL_DELAY = 5 * SECOND  # from a change to the record of its email

# The letters of order numbers (``orders.models.new_order_number``'s) in the order the database sorts them,
# two at a time.
_NUMBER_LETTERS = "23456789ABCDEFGHJKLMNPQRSTUVWXYZ"
_NUMBER_PAIRS = [a + b for a in _NUMBER_LETTERS for b in _NUMBER_LETTERS]
_CLOCK = [f"{hour:02d}:{minute:02d}:{second:02d}" for hour in range(24) for minute in range(60) for second in range(60)]


class HistoryLoadRefused(Exception):
    """The server skipped or altered rows of a chunk (the chunk is rolled back), or takes no local files."""


def history_awaiting(*, orders: int, overdue: int | None) -> tuple[int, int]:
    """How many of ``orders`` await payment, and how many of those are overdue (``overdue``, or a tenth)."""
    awaiting = min(orders, max(math.ceil(orders / AWAITING_PER_ORDERS), overdue or 0))
    return awaiting, math.ceil(awaiting / AWAITING_PER_OVERDUE) if overdue is None else overdue


@dataclass(frozen=True)
class HistoryWritten:
    orders: int
    overdue: int
    rows: int  # every row loaded: orders, lines, reservations, ledger, payments, shipments, refunds, emails
    seconds: float


def history_write(
    *, orders: int, skus: int, overdue: int | None = None, seed: int = 1, progress: Callable[[int], None]
) -> HistoryWritten:
    """Write ``orders`` orders over ``skus`` SKUs (made unless they exist), ``overdue`` of them overdue, as
    the module says; ``progress`` is told the orders of each chunk committed. The caller checks the bounds."""
    started = time.monotonic()
    [[(local_files,)]] = statements_run(connection.alias, [("SELECT @@local_infile", [])])
    if not local_files:
        raise HistoryLoadRefused("The server loads no local files: set local_infile=ON.")
    awaiting, overdue = history_awaiting(orders=orders, overdue=overdue)
    history = _History(catalog=_catalog(skus), buyers=_buyers(orders), seed=seed)
    with _unique_deferred(Order, IDEMPOTENCY_UNIQUE):
        rows = _chunks_load(history.chunks(orders=orders, awaiting=awaiting, overdue=overdue), progress=progress)
    history.stock_counters_move()
    return HistoryWritten(orders=orders, overdue=overdue, rows=rows, seconds=time.monotonic() - started)


@contextmanager
def _unique_deferred(model: type[models.Model], name: str) -> Iterator[None]:
    """Without the unique constraint ``name`` while the rows load, then with it again, built from them.

    The idempotency keys' hashes are random, so each new order would cost the load a read of an index
    page once that index outgrows the server's memory; built at the end, the index is one sorted pass.
    A run killed outright leaves it out until the next run ends.
    """
    constraint = next(constraint for constraint in model._meta.constraints if constraint.name == name)
    with connection.cursor() as cursor:
        present = name in connection.introspection.get_constraints(cursor, model._meta.db_table)
    if present:
        with connection.schema_editor() as editor:
            editor.remove_constraint(model, constraint)
    try:
        yield
    finally:
        with connection.schema_editor() as editor:
            editor.add_constraint(model, constraint)


class _Load(NamedTuple):
    """One table's rows of a chunk: the LOAD DATA statement (its file a parameter), the text, how many rows."""

    table: str
    sql: str
    text: str
    rows: int


class _Loader(NamedTuple):
    """A writer's connection, with local files allowed and no foreign keys checked, and its file."""

    connection: object  # the driver's connection
    path: str


def _chunks_load(chunks: Iterator[tuple[list[_Load], int]], *, progress: Callable[[int], None]) -> int:
    """Load each chunk in a transaction of its own, ``WRITERS`` at a time, while the next is built; how many
    rows were loaded. The first failure stops it and is raised; chunks not yet begun are dropped."""
    rows, pending, loaders = 0, deque(), queue.SimpleQueue()

    def load(loads: list[_Load]) -> None:
        loader = loaders.get()
        try:
            _chunk_load(loader, loads)
        finally:
            loaders.put(loader)

    def settle(keep: int) -> None:
        """Wait for the oldest chunks until ``keep`` are under way (so at most that many more are in memory)."""
        nonlocal rows
        while len(pending) > keep:
            future, orders, count = pending.popleft()
            future.result()
            rows += count
            progress(orders)

    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as directory:
        try:
            for number in range(WRITERS):
                loaders.put(_Loader(_loader_connect(), os.path.join(directory, f"rows{number}.tsv")))
            with ThreadPoolExecutor(max_workers=WRITERS, thread_name_prefix="seed_history") as writers:
                try:
                    for loads, orders in chunks:
                        pending.append((writers.submit(load, loads), orders, sum(part.rows for part in loads)))
                        settle(WRITERS)
                    settle(0)
                finally:
                    for future, _, _ in pending:
                        future.cancel()
        finally:
            while not loaders.empty():
                loaders.get().connection.close()
    return rows


def _loader_connect():
    """A connection as Django's, that may load local files; it checks no foreign keys."""
    loader = connection.get_new_connection(connection.get_connection_params() | {"local_infile": 1})
    loader.autocommit(False)
    cursor = loader.cursor()
    cursor.execute("SET SESSION foreign_key_checks = 0")
    cursor.close()
    return loader


def _chunk_load(loader: _Loader, loads: list[_Load]) -> None:
    """Load a chunk's tables in one transaction; any row skipped or altered rolls it back and is raised."""
    cursor = loader.connection.cursor()
    try:
        for load in loads:
            with open(loader.path, "w", encoding="utf-8") as file:
                file.write(load.text)
            cursor.execute(load.sql, [loader.path])
            if (loaded := cursor.rowcount) != load.rows or loader.connection.warning_count():
                cursor.execute("SHOW WARNINGS LIMIT 5")
                raise HistoryLoadRefused(f"{load.table}: {load.rows} rows sent, {loaded} loaded, {cursor.fetchall()}")
        loader.connection.commit()
    except BaseException:
        loader.connection.rollback()
        raise
    finally:
        cursor.close()


def _text(value) -> str:
    """``value`` as a field of LOAD DATA's text (tab-separated, backslash escapes, ``\\N`` for NULL)."""
    if value is None:
        return "\\N"
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int | Decimal):
        return str(value)
    escapes = {"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\0": "\\0"}
    return "".join(escapes.get(character, character) for character in str(value))


def _money(cents: int) -> str:
    return f"{cents // 100}.{cents % 100:02d}"


def _cents(amount: Decimal) -> int:
    return int(amount * 100)


class _Table:
    """One model's rows as LOAD DATA's text. A row gives ``columns``, in this order: its text is its values
    joined by tabs, then ``tail``, which gives every other column ``fixed``'s value or the field's default,
    as ``core.db.bulk_insert`` fills it. ``numbered``: the rows' ids are given here, in the order gathered."""

    def __init__(self, model: type[models.Model], columns: tuple[str, ...], fixed: dict | None = None, numbered=False):
        fields = {field.attname: field for field in model._meta.concrete_fields}
        fixed = dict(insert_defaults(model)) | (fixed or {})
        if numbered:
            columns = (model._meta.pk.attname, *columns)
        if unknown := [name for name in [*columns, *fixed] if name not in fields]:
            raise FieldDoesNotExist(f"{model._meta.label} has no column for {', '.join(unknown)}")
        rest = [field for name, field in fields.items() if name not in columns]
        if missing := [field.attname for field in rest if field.attname not in fixed]:
            raise MissingColumns(model, missing, 0)
        quote = connection.ops.quote_name
        names = ", ".join(quote(field.column) for field in [*(fields[name] for name in columns), *rest])
        self.table = model._meta.db_table
        self.sql = f"LOAD DATA LOCAL INFILE %s INTO TABLE {quote(self.table)} CHARACTER SET utf8mb4 ({names})"
        values = [_text(field.get_db_prep_save(fixed[field.attname], connection)) for field in rest]
        self.tail = "".join(f"\t{value}" for value in values) + "\n"
        self.next_id = _next_id(model) if numbered else None
        self.rows: list[str] = []

    def load(self) -> _Load:
        """The rows gathered, which are then let go."""
        rows, self.rows = self.rows, []
        if self.next_id is not None:
            start, self.next_id = self.next_id, self.next_id + len(rows)
            rows = [f"{pk}\t{row}" for pk, row in enumerate(rows, start)]
        return _Load(self.table, self.sql, "".join(rows), len(rows))


def _next_id(model: type[models.Model]) -> int:
    return (model._base_manager.aggregate(top=Max("pk"))["top"] or 0) + 1


@dataclass(frozen=True)
class _Sku:
    """A SKU of the history, with its lines' figures by quantity (1 to 3): in cents, and as row text."""

    index: int
    stock_id: int
    ships: bool
    line_text: tuple[str, ...]  # variant_id, quantity, unit_price, line_total, tax_rate, tax
    units_text: tuple[str, ...]  # variant_id, quantity
    total: tuple[int, ...]
    tax: tuple[int, ...]


@dataclass(frozen=True)
class _Catalog:
    skus: list[_Sku]
    method: ShippingOffer  # what orders of shipped goods choose; its price is below ``free_above``
    shipping_rate: Decimal
    shipping_tax: dict[int, int]  # the tax of a shipping price (the method's, or free), in cents


def _catalog(count: int) -> _Catalog:
    """The history's ``count`` SKUs (HIST-000001 on), each made with its product and stock row unless it
    exists, with their figures at the shop's tax rates; and the shipping method of its orders."""
    names = [f"{SKU_PREFIX}{n:06d}" for n in range(1, count + 1)]
    existing = set(ProductVariant.all_objects.filter(sku__startswith=SKU_PREFIX).values_list("sku", flat=True))
    new = [name for name in names if name not in existing]
    with transaction.atomic():
        products = Product.objects.bulk_create(
            [Product(name=f"History product {name.removeprefix(SKU_PREFIX)}") for name in new], batch_size=5000
        )
        ProductVariant.objects.bulk_create(
            [
                ProductVariant(product=product, sku=name, name=product.name, price=_price_of(name))
                for product, name in zip(products, new, strict=True)
            ],
            batch_size=5000,
        )
        stockless = ProductVariant.all_objects.filter(sku__in=names, stock__isnull=True)
        Stock.objects.bulk_create([Stock(variant=variant) for variant in stockless], batch_size=5000)
    country, included, currency = settings.SHOP_COUNTRY, settings.PRICES_INCLUDE_TAX, settings.SHOP_CURRENCY
    [rows] = statements_run(connection.alias, [tax_rates_statement(countries={country})])
    rates = tax_rates_from_rows(rows)
    variants = ProductVariant.all_objects.filter(sku__in=names).order_by("sku")
    skus = []
    for index, (variant_id, price, ships, tax_class_id, stock_id) in enumerate(
        variants.values_list("pk", "price", "requires_shipping", "tax_class_id", "stock")
    ):
        rate = rates.rate(country=country, tax_class_id=tax_class_id)
        totals = [price * quantity for quantity in range(4)]
        taxes = [tax_of(total, rate, included=included, currency=currency) for total in totals]
        skus.append(
            _Sku(
                index=index,
                stock_id=stock_id,
                ships=ships,
                line_text=tuple(f"{variant_id}\t{n}\t{price}\t{totals[n]}\t{rate}\t{taxes[n]}" for n in range(4)),
                units_text=tuple(f"{variant_id}\t{n}" for n in range(4)),
                total=tuple(map(_cents, totals)),
                tax=tuple(map(_cents, taxes)),
            )
        )
    method = _shipping_method()
    shipping_rate = rates.rate(country=country, tax_class_id=None) if settings.SHIPPING_TAXED else Decimal(0)
    shipping_tax = {
        _cents(price): _cents(tax_of(price, shipping_rate, included=included, currency=currency))
        for price in (method.price, Decimal(0))
    }
    return _Catalog(skus=skus, method=method, shipping_rate=shipping_rate, shipping_tax=shipping_tax)


def _price_of(sku: str) -> Decimal:
    """A price from 1.99 to 99.98, spread over the SKUs."""
    return Decimal(199 + int(sku.removeprefix(SKU_PREFIX)) * 7919 % 9800) / 100


def _shipping_method() -> ShippingOffer:
    """The cheapest method to the shop's country for the history's parcels (no weight), at its price below
    its ``free_above``; a zone of that country with a method is made if none goes there."""
    for _ in range(2):
        [rows] = statements_run(connection.alias, [shipping_methods_statement()])
        offers = shipping_offers_for(
            shipping_methods_from_rows(rows), country=settings.SHOP_COUNTRY, weight_grams=0, items_amount=Decimal(0)
        )
        if offers:
            return offers[0]
        zone = ShippingZone.objects.create(name="History", countries=[settings.SHOP_COUNTRY])
        ShippingMethod.objects.create(zone=zone, name="History post", price=Decimal("4.90"), free_above=Decimal(50))
    raise AssertionError("the method just made goes to the shop's country")


def _buyers(orders: int) -> tuple[list[tuple[int, str]], list[str]]:
    """The customers, made unless they exist, as (id, email), and as many guests' emails: one customer for
    ``ORDERS_PER_CUSTOMER`` orders, from 100 to ``MAX_CUSTOMERS``."""
    count = min(max(orders // ORDERS_PER_CUSTOMER, 100), MAX_CUSTOMERS)
    names = [f"{CUSTOMER_PREFIX}{n:05d}" for n in range(1, count + 1)]
    user_model = get_user_model()
    existing = set(user_model.objects.filter(username__startswith=CUSTOMER_PREFIX).values_list("username", flat=True))
    joined = timezone.now() - timedelta(days=HISTORY_DAYS + 1)
    user_model.objects.bulk_create(
        [
            user_model(username=name, email=f"{name}@example.com", password=make_password(None), date_joined=joined)
            for name in names
            if name not in existing
        ],
        batch_size=5000,
    )
    customers = list(user_model.objects.filter(username__in=names).order_by("pk").values_list("pk", "email"))
    return customers, [f"history-guest-{n:05d}@example.com" for n in range(1, count + 1)]


class _Buyer(NamedTuple):
    """Who places an order, as row text."""

    order_text: str  # the order's customer_id, email, buyer, client_address, idempotency_scope
    shipping_text: str  # its shipping_address, shipping_method_id, shipping_method_name, shipping_tax_rate
    email: str


def _buyer_texts(customers: list[tuple[int, str]], guests: list[str], *, catalog: _Catalog) -> list[_Buyer]:
    """The buyers, customers first, then guests; each ships to an address of its own in the shop's country."""
    who = [(pk, email, f"user:{pk}", f"user:{pk}") for pk, email in customers]
    who += [(None, email, f"email:{email_canonical(email)}", f"email:{email}") for email in guests]
    method, texts = catalog.method, []
    for n, (pk, email, buyer, scope) in enumerate(who):
        address = {
            "full_name": f"History buyer {n + 1}",
            "line1": f"{n % 200 + 1} Market Street",
            "city": "Springfield",
            "postal_code": f"{10000 + n % 90000}",
            "country": settings.SHOP_COUNTRY,
        }
        client = f"10.0.0.{n % CLIENT_ADDRESSES + 1}"
        shipping = [json.dumps(address), method.id, method.name, catalog.shipping_rate]
        texts.append(
            _Buyer(
                order_text="\t".join(map(_text, [pk, email, buyer, client, scope])),
                shipping_text="\t".join(map(_text, shipping)),
                email=_text(email),
            )
        )
    return texts


def _order_number(order_id: int) -> str:
    """Ten letters, as ``new_order_number`` makes them: the id's digits in base 32. Numbers rise with ids,
    so each goes to the end of the number's unique index, as the id goes to the end of the table; random
    ones would each cost the load a read of an index page once the index outgrows the server's memory."""
    pairs = _NUMBER_PAIRS
    return (
        f"{pairs[order_id >> 40 & 1023]}{pairs[order_id >> 30 & 1023]}{pairs[order_id >> 20 & 1023]}"
        f"{pairs[order_id >> 10 & 1023]}{pairs[order_id & 1023]}"
    )


class _Stamps:
    """A time on the history's clock as LOAD DATA's DATETIME(6) text, in UTC (as Django stores them)."""

    def __init__(self):
        self._days: dict[int, str] = {}

    def __call__(self, micros: int) -> str:
        day, micros = divmod(micros, DAY)
        if (date := self._days.get(day)) is None:
            date = self._days[day] = datetime.fromtimestamp(day * 86_400, UTC).strftime("%Y-%m-%d ")
        seconds, micros = divmod(micros, SECOND)
        return f"{date}{_CLOCK[seconds]}.{micros:06d}"


def _now() -> int:
    return time.time_ns() // 1000


class _History:
    """The history's rows, gathered chunk by chunk, and what they did to each SKU's stock."""

    def __init__(self, *, catalog: _Catalog, buyers: tuple[list[tuple[int, str]], list[str]], seed: int):
        self.catalog, self.skus = catalog, catalog.skus
        self.random = random.Random(seed).random
        self.stamp = _Stamps()
        customers, guests = buyers
        self.customers = len(customers)
        self.buyers = _buyer_texts(customers, guests, catalog=catalog)
        self.nothing_shipped = "\t".join(map(_text, [None, None, "", Decimal(0)]))
        self.order_id, self.line_id, self.reservation_id = _next_id(Order), _next_id(OrderLine), _next_id(Reservation)
        self.payment_id, self.shipment_id, self.refund_id = _next_id(Payment), _next_id(Shipment), _next_id(Refund)
        self.ttl = settings.RESERVATION_TTL_SECONDS * SECOND
        self.sweep = int(settings.EXPIRY_SWEEP_SECONDS * SECOND)
        self.now = _now()
        self.emails_since = self.now - settings.ORDER_EMAIL_KEEP_DAYS * DAY  # older records are pruned
        self.included = settings.PRICES_INCLUDE_TAX
        self.shipping_price = _cents(catalog.method.price)
        self.free_above = None if catalog.method.free_above is None else _cents(catalog.method.free_above)
        self.restocked = [0] * len(self.skus)
        self.committed = [0] * len(self.skus)
        self.held = [0] * len(self.skus)  # units of active reservations
        self.kept: dict[int, int] = {}  # units the chunk's orders keep (sold or held), by SKU index
        self.chunk_start = 0
        self._tables()

    def _tables(self) -> None:
        currency, provider = settings.SHOP_CURRENCY, settings.PAYMENT_PROVIDER
        self.orders = _Table(
            Order,
            (
                "id", "created_at", "updated_at", "number", "status", "expires_at", "paid_at", "payment_reference",
                "idempotency_key", "idempotency_key_hash",
                "customer_id", "email", "buyer", "client_address", "idempotency_scope",
                "shipping_address", "shipping_method_id", "shipping_method_name", "shipping_tax_rate",
                "subtotal", "shipping_price", "shipping_tax", "tax", "total", "amount_refunded", "shipping_refunded",
            ),
            # A made-up key is never replayed: the fingerprint marks the order as the history's instead.
            fixed={"currency": currency, "prices_include_tax": self.included, "request_fingerprint": MARK},
        )  # fmt: skip
        self.lines = _Table(
            OrderLine,
            (
                "id", "created_at", "updated_at", "order_id",
                "variant_id", "quantity", "unit_price", "line_total", "tax_rate", "tax",
                "quantity_shipped", "quantity_refunded",
            ),
        )  # fmt: skip
        self.reservations = _Table(
            Reservation,
            ("id", "created_at", "updated_at", "order_line_id", "variant_id", "quantity", "state", "expires_at",
             "release_reason"),
        )  # fmt: skip
        self.movements = _Table(
            StockMovement,
            ("created_at", "updated_at", "stock_id", "kind", "on_hand_delta", "reserved_delta", "order_id",
             "reservation_id", "reason"),
            numbered=True,
        )  # fmt: skip
        self.payments = _Table(
            Payment,
            ("id", "created_at", "updated_at", "order_id", "reference", "provider_payment", "amount",
             "amount_refunded", "state", "charged_at"),
            fixed={"provider": provider, "currency": currency},
        )  # fmt: skip
        self.shipments = _Table(
            Shipment,
            ("id", "created_at", "updated_at", "order_id", "tracking_number", "emailed_at"),
            fixed={"carrier": CARRIER},
        )
        self.shipment_lines = _Table(
            ShipmentLine, ("created_at", "updated_at", "shipment_id", "order_line_id", "quantity"), numbered=True
        )
        self.refunds = _Table(
            Refund,
            ("id", "created_at", "updated_at", "order_id", "payment_id", "amount", "shipping", "emailed_at"),
            fixed={"state": Refund.State.SUCCEEDED.value, "source": Refund.Source.STAFF.value, "restock": False},
        )
        self.refund_lines = _Table(
            RefundLine, ("created_at", "updated_at", "refund_id", "order_line_id", "quantity", "amount"), numbered=True
        )
        self.emails = _Table(OrderEmail, ("created_at", "updated_at", "order_id", "kind", "recipient"), numbered=True)
        self.tables = [
            self.movements, self.orders, self.lines, self.reservations, self.payments, self.shipments,
            self.shipment_lines, self.refunds, self.refund_lines, self.emails,
        ]  # fmt: skip

    def chunks(self, *, orders: int, awaiting: int, overdue: int) -> Iterator[tuple[list[_Load], int]]:
        """Per chunk of orders, its tables' rows and how many orders. First the past year's orders, evenly
        over it up to the overdue window, each in a status from a shuffled pattern of ``STATUS_SHARES``;
        then those awaiting payment, the overdue first, placed as they are written."""
        pattern = [status for status, share in STATUS_SHARES.items() for _ in range(share)]
        random.Random(self.random()).shuffle(pattern)
        past, fresh = orders - awaiting, awaiting - overdue
        start = self.now - HISTORY_DAYS * DAY
        step = (self.now - self.ttl - OVERDUE_WINDOW - start) / max(past, 1)
        count = 0
        for n in range(orders):
            if count == 0:
                self.chunk_start = start + int(n * step) if n < past else _now() - self.ttl - OVERDUE_WINDOW
            if n < past:
                self.order(pattern[n % len(pattern)], start + int((n + self.random()) * step))
            elif n < past + overdue:
                expired = OVERDUE_WINDOW * (past + overdue - n) // (overdue + 1)  # this long before now
                self.order(Status.AWAITING_PAYMENT, _now() - self.ttl - expired)
            else:
                age = self.ttl // 2 * (past + awaiting - n) // (fresh + 1)
                self.order(Status.AWAITING_PAYMENT, _now() - age)
            count += 1
            if count == ORDERS_PER_CHUNK or n == orders - 1:
                yield self.chunk_loads(), count
                count = 0

    def chunk_loads(self) -> list[_Load]:
        """The chunk's rows by table, its restock rows leading the ledger's, so that it reads in time order."""
        stamp = self.stamp(self.chunk_start - 60 * SECOND)
        restocks = []
        for index, units in sorted(self.kept.items()):
            lot = -(-units // RESTOCK_LOT) * RESTOCK_LOT
            self.restocked[index] += lot
            values = f"{self.skus[index].stock_id}\trestock\t{lot}\t0\t\\N\t\\N\t{MARK}"
            restocks.append(f"{stamp}\t{stamp}\t{values}{self.movements.tail}")
        self.movements.rows[:0] = restocks
        self.kept.clear()
        return [table.load() for table in self.tables if table.rows]

    def order(self, status: str, placed: int) -> None:
        """Gather the rows of an order placed at ``placed`` that is now in ``status``."""
        random_, stamp = self.random, self.stamp
        order_id = self.order_id
        self.order_id += 1
        if random_() < GUEST_SHARE:
            buyer = self.buyers[self.customers + int(random_() * (len(self.buyers) - self.customers))]
        else:
            buyer = self.buyers[int(random_() * self.customers)]
        lines = self.lines_drawn(status)

        # The figures by ``orders.pricing``'s rule: each line's tax rounded, the shipping taxed as one more line.
        subtotal = sum(sku.total[quantity] for sku, quantity in lines)
        ships = any(sku.ships for sku, _ in lines)
        shipping = self.shipping_price if ships and (self.free_above is None or subtotal < self.free_above) else 0
        shipping_tax = self.catalog.shipping_tax[shipping] if ships else 0
        tax = sum(sku.tax[quantity] for sku, quantity in lines) + shipping_tax
        total = subtotal + shipping + (0 if self.included else tax)

        # When its reservations were committed or released (awaiting payment: never), then its last change.
        settled, reason, payment_id = placed, "", None
        if status in CAPTURED:
            settled = placed + int(self.ttl * (0.05 + 0.9 * random_()))
            payment_id = self.payment_id
        elif status == Status.CANCELLED:
            settled, reason = placed + int(self.ttl * 0.9 * random_()), Reservation.ReleaseReason.CANCELLED
        elif status == Status.EXPIRED:
            settled, reason = placed + self.ttl + int(self.sweep * random_()), Reservation.ReleaseReason.EXPIRED
        elif status == Status.PAYMENT_FAILED:
            settled = placed + int(self.ttl * (0.05 + 0.9 * random_()))
            reason, payment_id = Reservation.ReleaseReason.PAYMENT_FAILED, self.payment_id
        changed, last = settled, self.now - 60 * SECOND  # nothing happens after the run began
        if status in (Status.SHIPPED, Status.PARTIALLY_SHIPPED):
            changed = min(settled + int(DAY * (0.1 + 3 * random_())), last)
        elif status == Status.REFUNDED:
            changed = min(settled + int(DAY * (0.5 + 20 * random_())), last)
        at, updated, expires = stamp(placed), stamp(changed), stamp(placed + self.ttl)

        reference, paid_at, refunded = "", "\\N", total if status == Status.REFUNDED else 0
        if payment_id is not None:
            self.payment_id += 1
            started, charged = stamp((placed + settled) // 2), stamp(settled)
            if status == Status.PAYMENT_FAILED:
                values = f"{order_id}\tcs_history_{payment_id}\t\t{_money(total)}\t0.00\tfailed\t\\N"
                self.payments.rows.append(f"{payment_id}\t{started}\t{charged}\t{values}{self.payments.tail}")
            else:
                reference, paid_at = f"cs_history_{payment_id}", charged
                state, last_change = ("refunded", updated) if refunded else ("captured", charged)
                values = (
                    f"{order_id}\t{reference}\tpi_history_{payment_id}\t{_money(total)}\t{_money(refunded)}\t{state}"
                    f"\t{charged}"
                )
                self.payments.rows.append(f"{payment_id}\t{started}\t{last_change}\t{values}{self.payments.tail}")
        shipment_id = refund_id = None
        if status in (Status.SHIPPED, Status.PARTIALLY_SHIPPED):
            shipment_id = self.shipment_id
            self.shipment_id += 1
            values = f"{order_id}\tHIST{shipment_id}\t{stamp(changed + EMAIL_DELAY)}"
            self.shipments.rows.append(f"{shipment_id}\t{updated}\t{updated}\t{values}{self.shipments.tail}")
        elif status == Status.REFUNDED:
            refund_id = self.refund_id
            self.refund_id += 1
            shipping_back = shipping + (0 if self.included else shipping_tax)
            values = (
                f"{order_id}\t{payment_id}\t{_money(total)}\t{_money(shipping_back)}\t{stamp(changed + EMAIL_DELAY)}"
            )
            self.refunds.rows.append(f"{refund_id}\t{updated}\t{updated}\t{values}{self.refunds.tail}")

        key_hash = hashlib.sha256(b"history-%d" % order_id).hexdigest()
        shipping_text = buyer.shipping_text if ships else self.nothing_shipped
        figures = (
            f"{_money(subtotal)}\t{_money(shipping)}\t{_money(shipping_tax)}\t{_money(tax)}\t{_money(total)}\t"
            f"{_money(refunded)}\t{int(bool(refunded and shipping))}"
        )
        self.orders.rows.append(
            f"{order_id}\t{at}\t{updated}\t{_order_number(order_id)}\t{status}\t{expires}\t{paid_at}\t{reference}\t"
            f"history-{order_id}\t{key_hash}\t{buyer.order_text}\t{shipping_text}\t{figures}{self.orders.tail}"
        )
        self.line_rows(order_id, status, lines, at=at, updated=updated, expires=expires, settled=stamp(settled),
                       reason=reason, shipment_id=shipment_id, refund_id=refund_id)  # fmt: skip
        if placed >= self.emails_since:
            self.email_rows(order_id, status, buyer.email, placed=placed, settled=settled)

    def lines_drawn(self, status: str) -> list[tuple[_Sku, int]]:
        """An order's lines (SKU, units): distinct SKUs, the first drawn towards the best sellers (the
        first SKUs); a partly shipped order has a unit of its first line left to send."""
        random_, skus = self.random, self.skus
        count = min(LINE_COUNTS[int(random_() * 10)], len(skus))
        first = int(len(skus) * random_() ** 2)
        picked = [first]
        if count > 1:
            second = 1 + int(random_() * (len(skus) - 1))
            picked.append((first + second) % len(skus))
        if count > 2:
            third = 1 + int(random_() * (len(skus) - 2))
            picked.append((first + third + (third >= second)) % len(skus))
        lines = [(skus[index], QUANTITIES[int(random_() * 10)]) for index in picked]
        if status == Status.PARTIALLY_SHIPPED and lines[0][1] == 1:
            lines[0] = (lines[0][0], 2)
        return lines

    def line_rows(self, order_id, status, lines, *, at, updated, expires, settled, reason, shipment_id, refund_id):
        """The order's lines, each with its reservation, its ledger rows, and the units sent or refunded."""
        state = "committed" if status in CAPTURED else "released" if reason else "active"
        movements, tail = self.movements.rows, self.movements.tail
        for position, (sku, quantity) in enumerate(lines):
            line_id, reservation_id = self.line_id, self.reservation_id
            self.line_id += 1
            self.reservation_id += 1
            shipped = quantity if status == Status.SHIPPED else 0
            if status == Status.PARTIALLY_SHIPPED and position == 0:
                shipped = quantity - 1
            refunded = quantity if refund_id else 0
            self.lines.rows.append(
                f"{line_id}\t{at}\t{updated if shipped or refunded else at}\t{order_id}\t{sku.line_text[quantity]}\t"
                f"{shipped}\t{refunded}{self.lines.tail}"
            )
            self.reservations.rows.append(
                f"{reservation_id}\t{at}\t{settled}\t{line_id}\t{sku.units_text[quantity]}\t{state}\t{expires}\t"
                f"{reason}{self.reservations.tail}"
            )
            movements.append(
                f"{at}\t{at}\t{sku.stock_id}\treserve\t0\t{quantity}\t{order_id}\t{reservation_id}\t{tail}"
            )
            if state == "committed":
                self.committed[sku.index] += quantity
                movement = f"commit\t{-quantity}\t{-quantity}\t{order_id}\t{reservation_id}\t"
                movements.append(f"{settled}\t{settled}\t{sku.stock_id}\t{movement}{tail}")
            elif state == "released":
                movement = f"release\t0\t{-quantity}\t{order_id}\t{reservation_id}\t{reason}"
                movements.append(f"{settled}\t{settled}\t{sku.stock_id}\t{movement}{tail}")
            else:
                self.held[sku.index] += quantity
            if state != "released":
                self.kept[sku.index] = self.kept.get(sku.index, 0) + quantity
            if shipped:
                values = f"{shipment_id}\t{line_id}\t{shipped}"
                self.shipment_lines.rows.append(f"{updated}\t{updated}\t{values}{self.shipment_lines.tail}")
            if refunded:
                paid = sku.total[quantity] + (0 if self.included else sku.tax[quantity])
                values = f"{refund_id}\t{line_id}\t{quantity}\t{_money(paid)}"
                self.refund_lines.rows.append(f"{updated}\t{updated}\t{values}{self.refund_lines.tail}")

    def email_rows(self, order_id: int, status: str, recipient: str, *, placed: int, settled: int) -> None:
        """The records of the emails the order's buyer was sent (``fulfilment.emails``): placed, and paid,
        failed or expired when it was."""
        kinds = [(OrderEmail.Kind.PLACED, placed)]
        if status in CAPTURED:
            kinds.append((OrderEmail.Kind.PAID, settled))
        elif status == Status.PAYMENT_FAILED:
            kinds.append((OrderEmail.Kind.PAYMENT_FAILED, settled))
        elif status == Status.EXPIRED:
            kinds.append((OrderEmail.Kind.EXPIRED, settled))
        for kind, when in kinds:
            sent = self.stamp(min(when + EMAIL_DELAY, _now()))
            self.emails.rows.append(f"{sent}\t{sent}\t{order_id}\t{kind}\t{recipient}{self.emails.tail}")

    def stock_counters_move(self) -> None:
        """Move each SKU's counters by what the history wrote to its ledger, in one transaction."""
        now = connection.ops.adapt_datetimefield_value(timezone.now())
        moves = [
            (self.restocked[sku.index] - self.committed[sku.index], self.held[sku.index], now, sku.stock_id)
            for sku in self.skus
            if self.restocked[sku.index]
        ]
        table = connection.ops.quote_name(Stock._meta.db_table)
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.executemany(
                f"UPDATE {table} SET on_hand = on_hand + %s, reserved = reserved + %s, version = version + 1,"
                " updated_at = %s WHERE id = %s",
                moves,
            )
