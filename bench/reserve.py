"""Reservation throughput and latency: our service against the database's floor and the articles' designs.

Every cell is W real client processes hammering one workload with one design for a fixed time, on
fresh rows, after which the same processes race a small stock to a sell-out so that a design that
oversells shows it: oversold units are counted from what buyers were told (each successful ``buy``)
and from the rows that record what was taken, both against the units the rows were given. The
articles' designs and the floor run on a bare table (``bench_stock``: no CHECK constraints, no
ledger, as the articles had it); ours runs on the shop's own tables, and so does the plain Django
checkout, the competitor for ``order_place``.

    DATABASE_URL=mysql://root:@127.0.0.1:3306/shop REDIS_URL=redis://127.0.0.1:6379/0 python -m bench.reserve
"""

import argparse
import itertools
import multiprocessing
import os
import queue
import random
import statistics
import subprocess
import threading
import time
import uuid
from abc import ABC, abstractmethod
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta

from bench._db import empty_tables, use_bench_database
from bench.shipping import ADDRESS, UNPRICED_ORDER, bench_shipping_method

DATABASE = use_bench_database()

import django  # noqa: E402

django.setup()

import redis_lock  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.cache import caches  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, connections, transaction  # noqa: E402
from django.db.models import Sum, prefetch_related_objects  # noqa: E402
from django.utils import timezone  # noqa: E402
from redis.lock import Lock  # noqa: E402

from core.errors import DomainError  # noqa: E402
from inventory.errors import InsufficientStock  # noqa: E402
from inventory.models import Reservation, Stock, StockMovement  # noqa: E402
from inventory.services import stock_reserve  # noqa: E402
from orders.models import Order, OrderLine, new_order_number  # noqa: E402
from orders.services import order_place  # noqa: E402
from shop.models import Product, ProductVariant  # noqa: E402
from vouchers.models import Voucher, VoucherUse  # noqa: E402

WORKERS = (1, 4, 16, 64)


@dataclass(frozen=True)
class Workload:
    name: str
    title: str
    skus: int  # rows in the timed phase
    lines: int  # SKUs per order
    sellout_skus: int  # rows in the sell-out race
    sellout_stock: int  # units per row in the sell-out race

    def pick(self, rng: random.Random) -> list[int]:
        return rng.sample(range(self.skus), self.lines) if self.lines > 1 else [rng.randrange(self.skus)]


WORKLOADS = {
    "hot": Workload("hot", "one hot SKU", skus=1, lines=1, sellout_skus=1, sellout_stock=40),
    "uniform": Workload("uniform", "1,000 SKUs, uniform", skus=1000, lines=1, sellout_skus=20, sellout_stock=2),
    "three": Workload("three", "3-SKU orders over 10 SKUs", skus=10, lines=3, sellout_skus=10, sellout_stock=4),
}

WARMUP = 0.5  # seconds each client runs before the timed phase counts
AMPLE = 10_000_000  # stock for the timed phase: it never sells out there


class Refused(Exception):
    """Not enough stock: a correct answer, counted apart from errors."""


# --- The bare table the floor and the articles' designs use -------------------------------------


def bare_rows(count: int, stock: int) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TABLE IF NOT EXISTS bench_stock (id INT AUTO_INCREMENT PRIMARY KEY, on_hand INT NOT NULL,"
            " reserved INT NOT NULL DEFAULT 0, version INT NOT NULL DEFAULT 0) ENGINE=InnoDB"
        )
        cursor.execute("TRUNCATE bench_stock")
        cursor.executemany("INSERT INTO bench_stock (on_hand) VALUES (%s)", [(stock,)] * count)
        cursor.execute("SELECT id FROM bench_stock ORDER BY id")
        return [row[0] for row in cursor.fetchall()]


def bare_counts() -> dict[int, tuple[int, int]]:
    """Per row: units it was given and units taken (no CHECK on the bare table: taken may exceed given)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT id, on_hand, reserved FROM bench_stock")
        return {row_id: (on_hand, reserved) for row_id, on_hand, reserved in cursor.fetchall()}


GUARDED = "UPDATE bench_stock SET reserved = reserved + 1 WHERE id = %s AND on_hand - reserved >= 1"


def _guarded_updates(cursor, ids) -> None:
    for row_id in sorted(ids):
        cursor.execute(GUARDED, [row_id])
        if cursor.rowcount != 1:
            raise Refused


class Design(ABC):
    """One way to reserve a unit of each picked row. ``buy`` returns normally or raises ``Refused``."""

    name = ""
    ours = False

    def prepare(self, workload: Workload, rows: int, stock: int) -> None:
        self.ids = bare_rows(rows, stock)

    def client_init(self) -> None:  # noqa: B027 - most designs need nothing per process
        """Per client process, before the race: open what the design needs (a Redis client)."""

    @abstractmethod
    def buy(self, picked: list[int]) -> None: ...

    def rows_count(self) -> list[tuple[int, int]]:
        """Per picked index: units the row was given and units the database records as taken."""
        counts = bare_counts()
        return [counts[row_id] for row_id in self.ids]


class Floor(Design):
    """The guarded UPDATE in autocommit (several rows: one transaction), no Redis."""

    name = "floor: guarded UPDATE"

    def buy(self, picked):
        ids = [self.ids[i] for i in picked]
        if len(ids) == 1:
            with connection.cursor() as cursor:
                cursor.execute(GUARDED, ids)
                if cursor.rowcount != 1:
                    raise Refused
            return
        with transaction.atomic(), connection.cursor() as cursor:
            _guarded_updates(cursor, ids)


class SelectForUpdate(Design):
    """The articles' pessimistic lock: read the rows FOR UPDATE, check, write."""

    name = "SELECT ... FOR UPDATE"

    def buy(self, picked):
        ids = sorted(self.ids[i] for i in picked)
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id, on_hand - reserved FROM bench_stock WHERE id IN ({','.join(['%s'] * len(ids))})"
                " ORDER BY id FOR UPDATE",
                ids,
            )
            if any(available < 1 for _, available in cursor.fetchall()):
                raise Refused
            for row_id in ids:
                cursor.execute("UPDATE bench_stock SET reserved = reserved + 1 WHERE id = %s", [row_id])


class Optimistic(Design):
    """The articles' optimistic lock: read the version, write only if it is unchanged, else retry."""

    name = "optimistic version retry"
    retries = 100

    def buy(self, picked):
        ids = sorted(self.ids[i] for i in picked)
        for _ in range(self.retries):
            with connection.cursor() as cursor:
                cursor.execute(
                    f"SELECT id, on_hand - reserved, version FROM bench_stock WHERE id IN "
                    f"({','.join(['%s'] * len(ids))}) ORDER BY id",
                    ids,
                )
                rows = cursor.fetchall()
            if any(available < 1 for _, available, _ in rows):
                raise Refused
            try:
                with transaction.atomic(), connection.cursor() as cursor:
                    for row_id, _, version in rows:
                        cursor.execute(
                            "UPDATE bench_stock SET reserved = reserved + 1, version = version + 1"
                            " WHERE id = %s AND version = %s",
                            [row_id, version],
                        )
                        if cursor.rowcount != 1:
                            raise _Conflict
                return
            except _Conflict:
                continue
        raise GaveUp("optimistic_gave_up")


class _Conflict(Exception):
    pass


class GaveUp(Exception):
    """A design gave up on a purchase (the optimistic retry's limit): an error with a code."""

    def __init__(self, code):
        super().__init__(code)
        self.code = code


class Sell3(Design):
    """Seed 000's ``sell3``: one global python-redis-lock taken per row *inside* the transaction."""

    name = "seed 000 sell3"

    def client_init(self):
        self.redis = caches[settings.LOCK_CACHE_ALIAS].client.get_client(write=True)
        with connection.cursor() as cursor:
            # Its global lock and the row locks can deadlock each other (3-SKU orders); give up on a
            # row after 5 s instead of InnoDB's 50 so the run finishes.
            cursor.execute("SET SESSION innodb_lock_wait_timeout = 5")

    def buy(self, picked):
        with transaction.atomic(), connection.cursor() as cursor:
            for row_id in [self.ids[i] for i in picked]:
                lock = redis_lock.Lock(self.redis, f"bench-buy-goods-{DATABASE}", expire=3, id=uuid.uuid4().hex)
                lock.acquire()
                try:
                    cursor.execute("SELECT on_hand - reserved FROM bench_stock WHERE id = %s", [row_id])
                    if cursor.fetchone()[0] < 1:
                        raise Refused
                    cursor.execute("UPDATE bench_stock SET reserved = reserved + 1 WHERE id = %s", [row_id])
                finally:
                    lock.release()  # before the commit: the seed's bug


class PollingLock(Design):
    """A per-SKU redis-py ``Lock`` (default 0.1 s polling) around the floor's guarded UPDATE."""

    name = "redis-py Lock, 0.1 s polling"

    def client_init(self):
        self.redis = caches[settings.LOCK_CACHE_ALIAS].client.get_client(write=True)

    def buy(self, picked):
        ids = sorted(self.ids[i] for i in picked)
        locks = [Lock(self.redis, f"bench-poll-{DATABASE}-{row_id}", timeout=10, blocking_timeout=60) for row_id in ids]
        for lock in locks:
            lock.acquire()
        try:
            Floor.buy(self, picked)
        finally:
            for lock in reversed(locks):
                lock.release()


# --- Ours -------------------------------------------------------------------------------------


def shop_rows(count: int, stock: int) -> list[ProductVariant]:
    """Fresh products with ``stock`` units each, ledger included (bulk inserts: this is a fixture)."""
    tag = uuid.uuid4().hex[:8].upper()
    product = Product.objects.create(name=f"Bench {tag}")
    variants = ProductVariant.objects.bulk_create(
        ProductVariant(product=product, sku=f"B{tag}-{n:04d}", name=f"Bench {n}", price=1) for n in range(count)
    )
    stocks = Stock.objects.bulk_create(Stock(variant=p, on_hand=stock) for p in variants)
    StockMovement.objects.bulk_create(
        StockMovement(stock=s, kind=StockMovement.Kind.RESTOCK, on_hand_delta=stock, reason="bench") for s in stocks
    )
    return variants


def units_given_and_taken(variants) -> list[tuple[int, int]]:
    """Per product: units given (restock and adjustment ledger rows) and taken (active and committed
    reservation rows). Neither is the ``Stock`` counter, which the CHECK ``reserved <= on_hand`` bounds
    whatever happened."""
    given = dict(
        StockMovement.objects.filter(
            stock__variant__in=variants, kind__in=[StockMovement.Kind.RESTOCK, StockMovement.Kind.ADJUST]
        )
        .values("stock__variant_id")
        .annotate(units=Sum("on_hand_delta"))
        .values_list("stock__variant_id", "units")
    )
    taken = dict(
        Reservation.objects.filter(
            variant__in=variants, state__in=[Reservation.State.ACTIVE, Reservation.State.COMMITTED]
        )
        .values("variant_id")
        .annotate(units=Sum("quantity"))
        .values_list("variant_id", "units")
    )
    return [(given.get(p.pk, 0), taken.get(p.pk, 0)) for p in variants]


class ShopDesign(Design):
    """A design on the shop's own tables: oversold units are counted from its reservation and ledger rows."""

    def prepare(self, workload, rows, stock):
        self.variants = shop_rows(rows, stock)

    def rows_count(self):
        return units_given_and_taken(self.variants)


class OurDesign(ShopDesign):
    ours = True


class OurStockReserve(OurDesign):
    """``stock_reserve`` on orders placed beforehand (one per SKU combination)."""

    name = "ours: stock_reserve"

    def prepare(self, workload, rows, stock):
        super().prepare(workload, rows, stock)
        combos = list(itertools.combinations(range(rows), workload.lines))
        expires = timezone.now() + timedelta(hours=1)
        orders = Order.objects.bulk_create(
            Order(
                number=new_order_number(),
                email="bench@example.com",
                idempotency_key=uuid.uuid4().hex,
                idempotency_key_hash=uuid.uuid4().hex,
                idempotency_scope="email:bench@example.com",
                request_fingerprint="-",
                expires_at=expires,
                **UNPRICED_ORDER,
            )
            for _ in combos
        )
        OrderLine.objects.bulk_create(
            OrderLine(order=order, variant=self.variants[i], quantity=1, unit_price=1, line_total=1)
            for order, combo in zip(orders, combos, strict=True)
            for i in combo
        )
        # As a caller that has just created its orders: lines and products at hand, no query per call.
        prefetch_related_objects(orders, "lines__variant")
        self.orders = dict(zip(combos, orders, strict=True))
        self.expires = expires

    def buy(self, picked):
        try:
            stock_reserve(order=self.orders[tuple(sorted(picked))], expires_at=self.expires)
        except InsufficientStock as exc:
            raise Refused from exc


class OurRowsNoLock(OurStockReserve):
    """``stock_reserve``'s rows and guarded UPDATEs, in its one round trip, without the Redis lock or the
    batching around them: what our writes cost alone. Safe without the lock (the guard decides), but
    without the lock's queue a hot SKU's buyers wait on its row lock, one commit each."""

    name = "our rows, no lock"
    ours = False

    def buy(self, picked):
        # Imported here: bench.targets may run this bench code against another checkout's app.
        from inventory import sql

        order = self.orders[tuple(sorted(picked))]
        rows = [
            {
                "order_line_id": line.pk,
                "variant_id": line.variant_id,
                "quantity": line.quantity,
                "expires_at": self.expires,
            }
            for line in order.lines.all()
        ]
        with transaction.atomic():
            statements, rows = sql.reservations_statements(rows)
            if sql.reserved_add_if_free(
                quantities={row["variant_id"]: 1 for row in rows}, statements=statements
            ).refused:
                raise Refused


class OurOrderPlace(OurDesign):
    """The full ``order_place``: order shipped to an address (checked, priced and taxed), lines,
    reservations and ledger rows, idempotency key."""

    name = "ours: order_place"

    def prepare(self, workload, rows, stock):
        super().prepare(workload, rows, stock)
        self.method = bench_shipping_method()

    def buy(self, picked):
        items = [{"sku": self.variants[i].sku, "quantity": 1} for i in picked]
        try:
            order_place(
                email="bench@example.com",
                items=items,
                idempotency_key=uuid.uuid4().hex,
                shipping_address=ADDRESS,
                shipping_method=self.method,
            )
        except InsufficientStock as exc:
            raise Refused from exc


class PlainCheckout(ShopDesign):
    """The plain Django checkout, the competitor for ``order_place``: what a Django developer writes, and
    roughly what Saleor does, no Redis lock (``bench.http_views.checkout_plain``, which the HTTP cells
    serve too). One transaction locks the cart's stock rows with ``select_for_update()`` in primary-key
    order, checks them, reserves with ``F()`` UPDATEs and creates the order, its lines and the same
    reservation and ledger rows through the ORM; a short line rolls it all back."""

    name = "plain Django checkout"

    def prepare(self, workload, rows, stock):
        # Imported here: bench.targets may run this bench code against another checkout's app.
        from bench.http_views import checkout_plain

        super().prepare(workload, rows, stock)
        self.checkout = checkout_plain
        self.customer, _ = get_user_model().objects.get_or_create(
            username="bench-plain", defaults={"email": "bench@example.com"}
        )
        self.method = bench_shipping_method()

    def buy(self, picked):
        items = [{"sku": self.variants[i].sku, "quantity": 1} for i in picked]
        try:
            self.checkout(
                customer=self.customer,
                items=items,
                idempotency_key=uuid.uuid4().hex,
                shipping_address=ADDRESS,
                shipping_method=self.method,
            )
        except InsufficientStock as exc:
            raise Refused from exc


DESIGNS = [
    OurStockReserve,
    OurOrderPlace,
    PlainCheckout,
    OurRowsNoLock,
    Floor,
    SelectForUpdate,
    Optimistic,
    Sell3,
    PollingLock,
]


# --- Running a cell ---------------------------------------------------------------------------


@dataclass
class Cell:
    workload: str
    design: str
    ours: bool
    workers: int
    ops: int = 0
    elapsed: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    errors: Counter = field(default_factory=Counter)
    units_per_client: list[int] = field(default_factory=list)
    # Sell-out race, summed over rows: units buyers were told they got beyond the row's units, and units
    # the rows record as taken beyond them. Answers of clients killed as stuck are not counted.
    oversold_told: int = 0
    oversold_rows: int = 0
    cpu: dict = field(default_factory=dict)  # CPU seconds used in the timed phase, by clients and servers
    machine_busy: float = 0.0  # cores the whole machine kept busy in the timed phase (kernel included)
    buy_cpu_p50_ms: float = 0.0  # a buyer's own CPU per purchase, median: on a hot SKU, a served buyer's

    @property
    def cpu_ms_per_op(self) -> float:
        return sum(self.cpu.values()) * 1000 / self.ops if self.ops else 0.0

    @property
    def throughput(self) -> float:
        return self.ops / self.elapsed if self.elapsed else 0.0


def _client(design, workload, seed, barrier, duration, max_refusals, out, warmup=0.0, everyone_done=None):
    connections.close_all()  # never share the parent's socket
    design.client_init()
    connection.ensure_connection()
    rng = random.Random(seed)
    latencies, buy_cpu, sold, errors, refusals = [], [], 0, Counter(), 0
    told = Counter()  # units each picked row was said to have given this client (every phase)
    if warmup:  # one untimed purchase first: connections, scripts and caches get set up
        try:
            design.buy(workload.pick(rng))
        except Exception:  # counted in the timed phase, not here
            _rollback_if_broken()
    barrier.wait()
    cpu = None
    start = time.monotonic() + warmup  # what happens before start is not counted: processes settle in
    while time.monotonic() - start < duration and refusals < max_refusals:
        picked = workload.pick(rng)
        began = time.monotonic()
        counted = began >= start
        if counted and cpu is None:
            cpu = sum(os.times()[:2])
        used = time.process_time()
        try:
            design.buy(picked)
            told.update(picked)
            sold += counted
            if counted:
                buy_cpu.append(time.process_time() - used)
        except Refused:
            refusals += 1
        except (DomainError, GaveUp) as exc:
            errors[exc.code] += 1
        except Exception as exc:  # the articles' designs fail in their own ways (a lock lost mid-sale, ...)
            errors[type(exc).__name__] += 1
            _rollback_if_broken()
        if counted:
            latencies.append(time.monotonic() - began)
    out.put((start, time.monotonic(), latencies, sold, told, buy_cpu, errors, sum(os.times()[:2]) - (cpu or 0)))
    # Keep the load on, uncounted, until every client has finished its timed phase: a counted
    # purchase never runs beside fewer clients, or beside clients exiting (which costs CPU too).
    while everyone_done is not None and not everyone_done.is_set():
        try:
            design.buy(workload.pick(rng))
        except Exception:
            _rollback_if_broken()
    connections.close_all()


def _rollback_if_broken() -> None:
    if connection.in_atomic_block or not connection.get_autocommit():
        connection.close()  # a transaction left half-done by a failed design: start clean


def _race(design, workload, workers, duration, max_refusals, warmup=0.0):
    """Run the clients; those still stuck a minute after the phase (a design that deadlocks) are killed.

    Returns their results, how many were stuck, the CPU the servers used while clients were timed and
    how many cores the whole machine kept busy meanwhile.
    A timed race (``warmup``) keeps every client buying until all have reported.
    """
    ctx = multiprocessing.get_context("fork")
    connections.close_all()
    barrier, out = ctx.Barrier(workers + 1), ctx.Queue()  # and us: we time the servers' CPU
    everyone_done = ctx.Event() if warmup else None
    procs = [
        ctx.Process(
            target=_client,
            args=(design, workload, seed, barrier, duration, max_refusals, out, warmup, everyone_done),
        )
        for seed in range(workers)
    ]
    for proc in procs:
        proc.start()
    try:
        barrier.wait(timeout=60)
    except threading.BrokenBarrierError:
        pass  # a client hung in its first purchase (a design that deadlocks): the rest time out below
    time.sleep(warmup)
    servers_at_start, machine_at_start = server_cpu(), machine_cpu()
    deadline = time.monotonic() + duration + 60
    results = []
    for _ in procs:
        try:
            results.append(out.get(timeout=max(deadline - time.monotonic(), 0.1)))
        except queue.Empty:
            break
    servers_used = server_cpu(servers_at_start)
    machine_busy = _per_second(machine_cpu(), machine_at_start)
    if everyone_done is not None:
        everyone_done.set()
        for proc in procs:
            proc.join(timeout=max(deadline - time.monotonic(), 0.1))
    for proc in procs:
        if proc.is_alive():
            proc.kill()
        proc.join()
    return results, workers - len(results), servers_used, machine_busy


SERVERS = {"mariadb": "mariadbd", "redis": "redis-server"}


def machine_cpu() -> tuple[float, float]:
    """CPU seconds the whole machine has spent not idle (every process and the kernel), and when: /proc/stat.

    Summing our processes misses what the kernel does for them outside their accounts (loopback
    networking in soft interrupts, wake-ups) and whatever else runs: this tells whether cores were free.
    """
    with open("/proc/stat") as stat:
        user, nice, system, idle, iowait, irq, softirq, steal = map(int, stat.readline().split()[1:9])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK"), time.monotonic()


def _per_second(now: tuple[float, float], then: tuple[float, float]) -> float:
    return (now[0] - then[0]) / (now[1] - then[1]) if now[1] > then[1] else 0.0


def server_cpu(since: dict | None = None) -> dict:
    """CPU seconds the database and Redis servers have used (minus ``since``), from /proc."""
    ticks = os.sysconf("SC_CLK_TCK")
    used = {}
    for name, command in SERVERS.items():
        total = 0
        for pid in subprocess.run(["pidof", command], capture_output=True, text=True).stdout.split():
            with open(f"/proc/{pid}/stat") as stat:
                fields = stat.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / ticks
        used[name] = total - (since or {}).get(name, 0)
    return used


def run_cell(design_class, workload: Workload, workers: int, duration: float) -> Cell:
    design = design_class()
    cell = Cell(workload.name, design.name, design.ours, workers)

    design.prepare(workload, workload.skus, AMPLE)
    results, stuck, servers_used, cell.machine_busy = _race(
        design, workload, workers, duration, max_refusals=10**9, warmup=WARMUP
    )
    latencies = sorted(lat for _, _, lats, *_ in results for lat in lats)
    cell.ops = sum(sold for _, _, _, sold, *_ in results)
    cell.elapsed = max(end for _, end, *_ in results) - min(start for start, *_ in results) if results else 0.0
    cell.p50_ms = statistics.median(latencies) * 1000 if latencies else 0.0
    cell.p99_ms = latencies[max(int(len(latencies) * 0.99) - 1, 0)] * 1000 if latencies else 0.0
    cell.units_per_client = sorted(sold for _, _, _, sold, *_ in results)
    buy_cpu = [used for *_, used_per_buy, _, _ in results for used in used_per_buy]
    cell.buy_cpu_p50_ms = statistics.median(buy_cpu) * 1000 if buy_cpu else 0.0
    for *_, errors, _ in results:
        cell.errors.update(errors)
    if stuck:
        cell.errors["stuck, killed"] += stuck
    cell.cpu = {"clients": sum(cpu for *_, cpu in results)} | {name: used for name, used in servers_used.items()}

    # The sell-out race: small stock, everyone buys until refused a few times (or time is up).
    design.prepare(workload, workload.sellout_skus, workload.sellout_stock)
    sellout = Workload(workload.name, workload.title, workload.sellout_skus, workload.lines, workload.sellout_skus, 0)
    results, stuck, *_ = _race(design, sellout, workers, duration, max_refusals=5)
    if stuck:
        cell.errors["stuck in sell-out, killed"] += stuck
    told = sum((client_told for _, _, _, _, client_told, *_ in results), Counter())
    rows = design.rows_count()
    cell.oversold_told = sum(max(0, told[index] - given) for index, (given, _) in enumerate(rows))
    cell.oversold_rows = sum(max(0, taken - given) for given, taken in rows)
    return cell


def _cpu_split(cell) -> str:
    return "/".join(f"{used * 1000 / cell.ops:.2f}" for used in cell.cpu.values()) if cell.ops else "-"


def reset_database() -> None:
    call_command("migrate", verbosity=0)
    empty_tables(VoucherUse, Voucher, StockMovement, Reservation, OrderLine, Order, Stock, ProductVariant, Product)


def wait_for_quiet_machine(*, busy_below: float = 0.3, timeout: float = 60.0) -> tuple[float, float]:
    """Wait until the machine's cores are nearly idle, so a matrix's first cell shares them with nothing
    left over from the cells before (a killed client's rollback, MariaDB's purge). Returns the seconds
    waited and the cores busy at the end, for the log."""
    started, then = time.monotonic(), machine_cpu()
    while True:
        time.sleep(0.5)
        now = machine_cpu()
        busy = _per_second(now, then)
        if busy < busy_below or now[1] - started >= timeout:
            return now[1] - started, busy
        then = now


def run_matrix(*, workloads, workers, designs, duration, progress=print) -> list[Cell]:
    """Every cell, each started on a quiet machine: what a cell leaves behind (MariaDB purging the rows
    a W=64 cell wrote, a killed client's rollback) would otherwise slow the cell after it."""
    reset_database()
    waited, busy = wait_for_quiet_machine()
    progress(f"machine quiet after {waited:.1f} s ({busy:.2f} cores busy)")
    cells = []
    for workload_name in workloads:
        for count in workers:
            for design_class in designs:
                if cells:
                    wait_for_quiet_machine()
                cell = run_cell(design_class, WORKLOADS[workload_name], count, duration)
                progress(
                    f"{workload_name:8} W={count:<3} {cell.design:30} {cell.throughput:8.0f}/s "
                    f"p50 {cell.p50_ms:7.1f} ms  p99 {cell.p99_ms:7.1f} ms  "
                    f"oversold (told / rows) {cell.oversold_told} / {cell.oversold_rows}  "
                    f"cpu/op {cell.cpu_ms_per_op:.2f} ms {_cpu_split(cell)}  cores busy {cell.machine_busy:.2f}  "
                    f"errors {dict(cell.errors) or '-'}"
                )
                cells.append(cell)
    return cells


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--workers", type=int, nargs="+", default=list(WORKERS))
    parser.add_argument("--designs", nargs="+", help="class names, e.g. Floor OurStockReserve")
    parser.add_argument("--duration", type=float, default=2.0, help="seconds per timed phase")
    args = parser.parse_args()
    designs = [d for d in DESIGNS if not args.designs or d.__name__ in args.designs]
    run_matrix(workloads=args.workloads, workers=args.workers, designs=designs, duration=args.duration)


if __name__ == "__main__":
    main()
