"""The history's rows, gathered chunk by chunk as the services would have left them, and what they did
to each SKU's stock."""

import hashlib
import random
from collections.abc import Iterator
from decimal import Decimal

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from demo.history.buyers import buyer_texts
from demo.history.catalog import Catalog, Sku
from demo.history.loading import Load, Table, new_id
from demo.history.text import DAY, HISTORY_DAYS, SECOND, Stamps, cents, clock_now, field_text, money
from fulfilment.models import Shipment, ShipmentLine
from inventory.models import Reservation, Stock, StockMovement
from orders.models import PAID_STATUSES, Order, OrderEmail, OrderLine
from payments.models import Payment, Refund, RefundLine

MARK = "seed_history"  # the reason of its restock rows, and the request fingerprint of its orders

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
GUEST_SHARE = 0.3  # of the orders, placed by guests; the rest by customers with accounts
LINE_COUNTS = (1, 1, 1, 1, 1, 2, 2, 2, 3, 3)  # lines of an order, drawn evenly from these
QUANTITIES = (1, 1, 1, 1, 1, 1, 1, 2, 2, 3)  # units of a line, drawn evenly from these

ORDERS_PER_CHUNK = 5_000
RESTOCK_LOT = 100  # a restock brings the units a chunk's orders keep, rounded up to whole lots
CARRIER = "DHL"

OVERDUE_WINDOW = 3600 * SECOND  # the overdue orders expired within this long before they are written
EMAIL_DELAY = 5 * SECOND  # from a change to the record of its email

# The letters of order numbers (``orders.models.new_order_number``'s) in the order the database sorts them,
# two at a time.
_NUMBER_LETTERS = "23456789ABCDEFGHJKLMNPQRSTUVWXYZ"
_NUMBER_PAIRS = [a + b for a in _NUMBER_LETTERS for b in _NUMBER_LETTERS]


def _order_number(order_id: int) -> str:
    """Ten letters, as ``new_order_number`` makes them: the id's digits in base 32. Numbers rise with ids,
    so each goes to the end of the number's unique index, as the id goes to the end of the table; random
    ones would each cost the load a read of an index page once the index outgrows the server's memory."""
    pairs = _NUMBER_PAIRS
    return (
        f"{pairs[order_id >> 40 & 1023]}{pairs[order_id >> 30 & 1023]}{pairs[order_id >> 20 & 1023]}"
        f"{pairs[order_id >> 10 & 1023]}{pairs[order_id & 1023]}"
    )


class History:
    """The history's rows, gathered chunk by chunk, and what they did to each SKU's stock."""

    def __init__(self, *, catalog: Catalog, buyers: tuple[list[tuple[int, str]], list[str]], seed: int):
        self.catalog, self.skus = catalog, catalog.skus
        self.random = random.Random(seed).random
        self.stamp = Stamps()
        customers, guests = buyers
        self.customers = len(customers)
        self.buyers = buyer_texts(customers, guests, catalog=catalog)
        self.nothing_shipped = "\t".join(map(field_text, [None, None, "", Decimal(0)]))
        self.order_id, self.line_id, self.reservation_id = new_id(Order), new_id(OrderLine), new_id(Reservation)
        self.payment_id, self.shipment_id, self.refund_id = new_id(Payment), new_id(Shipment), new_id(Refund)
        self.ttl = settings.RESERVATION_TTL_SECONDS * SECOND
        self.sweep = int(settings.EXPIRY_SWEEP_SECONDS * SECOND)
        self.now = clock_now()
        self.emails_since = self.now - settings.ORDER_EMAIL_KEEP_DAYS * DAY  # older records are pruned
        self.included = settings.PRICES_INCLUDE_TAX
        self.shipping_price = cents(catalog.method.price)
        self.free_above = None if catalog.method.free_above is None else cents(catalog.method.free_above)
        self.restocked = [0] * len(self.skus)
        self.committed = [0] * len(self.skus)
        self.held = [0] * len(self.skus)  # units of active reservations
        self.kept: dict[int, int] = {}  # units the chunk's orders keep (sold or held), by SKU index
        self.chunk_start = 0
        self._tables()

    def _tables(self) -> None:
        currency, provider = settings.SHOP_CURRENCY, settings.PAYMENT_PROVIDER
        self.orders = Table(
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
        self.lines = Table(
            OrderLine,
            (
                "id", "created_at", "updated_at", "order_id",
                "variant_id", "quantity", "unit_price", "line_total", "tax_rate", "tax",
                "quantity_shipped", "quantity_refunded",
            ),
        )  # fmt: skip
        self.reservations = Table(
            Reservation,
            ("id", "created_at", "updated_at", "order_line_id", "variant_id", "quantity", "state", "expires_at",
             "release_reason"),
        )  # fmt: skip
        self.movements = Table(
            StockMovement,
            ("created_at", "updated_at", "stock_id", "kind", "on_hand_delta", "reserved_delta", "order_id",
             "reservation_id", "reason"),
            numbered=True,
        )  # fmt: skip
        self.payments = Table(
            Payment,
            ("id", "created_at", "updated_at", "order_id", "reference", "provider_payment", "amount",
             "amount_refunded", "state", "charged_at"),
            fixed={"provider": provider, "currency": currency},
        )  # fmt: skip
        self.shipments = Table(
            Shipment,
            ("id", "created_at", "updated_at", "order_id", "tracking_number", "emailed_at"),
            fixed={"carrier": CARRIER},
        )
        self.shipment_lines = Table(
            ShipmentLine, ("created_at", "updated_at", "shipment_id", "order_line_id", "quantity"), numbered=True
        )
        self.refunds = Table(
            Refund,
            ("id", "created_at", "updated_at", "order_id", "payment_id", "amount", "shipping", "emailed_at"),
            fixed={"state": Refund.State.SUCCEEDED.value, "source": Refund.Source.STAFF.value, "restock": False},
        )
        self.refund_lines = Table(
            RefundLine, ("created_at", "updated_at", "refund_id", "order_line_id", "quantity", "amount"), numbered=True
        )
        self.emails = Table(OrderEmail, ("created_at", "updated_at", "order_id", "kind", "recipient"), numbered=True)
        self.tables = [
            self.movements, self.orders, self.lines, self.reservations, self.payments, self.shipments,
            self.shipment_lines, self.refunds, self.refund_lines, self.emails,
        ]  # fmt: skip

    def chunks(self, *, orders: int, awaiting: int, overdue: int) -> Iterator[tuple[list[Load], int]]:
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
                self.chunk_start = start + int(n * step) if n < past else clock_now() - self.ttl - OVERDUE_WINDOW
            if n < past:
                self.order(pattern[n % len(pattern)], start + int((n + self.random()) * step))
            elif n < past + overdue:
                expired = OVERDUE_WINDOW * (past + overdue - n) // (overdue + 1)  # this long before now
                self.order(Status.AWAITING_PAYMENT, clock_now() - self.ttl - expired)
            else:
                age = self.ttl // 2 * (past + awaiting - n) // (fresh + 1)
                self.order(Status.AWAITING_PAYMENT, clock_now() - age)
            count += 1
            if count == ORDERS_PER_CHUNK or n == orders - 1:
                yield self.chunk_loads(), count
                count = 0

    def chunk_loads(self) -> list[Load]:
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
                values = f"{order_id}\tcs_history_{payment_id}\t\t{money(total)}\t0.00\tfailed\t\\N"
                self.payments.rows.append(f"{payment_id}\t{started}\t{charged}\t{values}{self.payments.tail}")
            else:
                reference, paid_at = f"cs_history_{payment_id}", charged
                state, last_change = ("refunded", updated) if refunded else ("captured", charged)
                values = (
                    f"{order_id}\t{reference}\tpi_history_{payment_id}\t{money(total)}\t{money(refunded)}\t{state}"
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
            values = f"{order_id}\t{payment_id}\t{money(total)}\t{money(shipping_back)}\t{stamp(changed + EMAIL_DELAY)}"
            self.refunds.rows.append(f"{refund_id}\t{updated}\t{updated}\t{values}{self.refunds.tail}")

        key_hash = hashlib.sha256(b"history-%d" % order_id).hexdigest()
        shipping_text = buyer.shipping_text if ships else self.nothing_shipped
        figures = (
            f"{money(subtotal)}\t{money(shipping)}\t{money(shipping_tax)}\t{money(tax)}\t{money(total)}\t"
            f"{money(refunded)}\t{int(bool(refunded and shipping))}"
        )
        self.orders.rows.append(
            f"{order_id}\t{at}\t{updated}\t{_order_number(order_id)}\t{status}\t{expires}\t{paid_at}\t{reference}\t"
            f"history-{order_id}\t{key_hash}\t{buyer.order_text}\t{shipping_text}\t{figures}{self.orders.tail}"
        )
        self.line_rows(order_id, status, lines, at=at, updated=updated, expires=expires, settled=stamp(settled),
                       reason=reason, shipment_id=shipment_id, refund_id=refund_id)  # fmt: skip
        if placed >= self.emails_since:
            self.email_rows(order_id, status, buyer.email, placed=placed, settled=settled)

    def lines_drawn(self, status: str) -> list[tuple[Sku, int]]:
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
                values = f"{refund_id}\t{line_id}\t{quantity}\t{money(paid)}"
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
            sent = self.stamp(min(when + EMAIL_DELAY, clock_now()))
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
