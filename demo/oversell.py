"""The background articles' oversell experiment, run in real processes against the configured database.

Each strategy is a way to sell one unit, as the articles wrote it (``naive``, ``mutex``, ``optimistic``,
``pessimistic``, ``seed_redis_lock``) or as this project does it (``service``). The articles' designs
work on a bare table (``OversellDemoGoods``: no CHECK constraints, no ledger); ``pause`` stands in for
the articles' ``time.sleep`` and widens their race windows the way real latency does.
"""

import multiprocessing
import threading
import time
import uuid
from dataclasses import dataclass

from django.db import connections, transaction
from django.db.models import F

from core.errors import DomainError
from demo.models import OversellDemoGoods
from inventory.locks import sku_locks
from inventory.models import Stock
from inventory.services import stock_restock
from orders.models import Order
from orders.services import order_cancel, order_place
from shop.models import Product, ProductVariant

STRATEGIES = ["naive", "mutex", "optimistic", "pessimistic", "seed_redis_lock", "service"]
OPTIMISTIC_RETRIES = 100

_process_mutex = threading.Lock()


@dataclass
class ExperimentResult:
    strategy: str
    attempts: int
    initial_stock: int
    units_sold: int
    final_stock: int

    @property
    def oversold(self) -> int:
        return max(0, self.units_sold - self.initial_stock)

    @property
    def lost_updates(self) -> int:
        """Units sold but never deducted: the stock left is higher than what was not sold."""
        return max(0, self.final_stock - (self.initial_stock - self.units_sold))

    @property
    def correct(self) -> bool:
        return self.oversold == 0 and self.lost_updates == 0 and self.final_stock >= 0


# --- The articles' designs, one unit per call -----------------------------------------------------


def _buy_naive(goods_id: int, pause: float) -> bool:
    """Read, check, write the computed value back: two buyers read 5, both write 4."""
    stocks = OversellDemoGoods.objects.get(pk=goods_id).stocks
    if stocks < 1:
        return False
    time.sleep(pause)
    OversellDemoGoods.objects.filter(pk=goods_id).update(stocks=stocks - 1)
    return True


def _buy_mutex(goods_id: int, pause: float) -> bool:
    """The naive sale behind a process-local mutex: it serialises threads, not processes or hosts."""
    with _process_mutex:
        return _buy_naive(goods_id, pause)


def _buy_optimistic(goods_id: int, pause: float) -> bool:
    """Compare-and-set on ``version``, retried: correct, at the price of retries under contention."""
    for _ in range(OPTIMISTIC_RETRIES):
        goods = OversellDemoGoods.objects.get(pk=goods_id)
        if goods.stocks < 1:
            return False
        time.sleep(pause)
        if OversellDemoGoods.objects.filter(pk=goods_id, version=goods.version).update(
            stocks=goods.stocks - 1, version=goods.version + 1
        ):
            return True
    return False


def _buy_pessimistic(goods_id: int, pause: float) -> bool:
    """``SELECT ... FOR UPDATE`` in a transaction: correct, holds a row lock for the whole sale."""
    with transaction.atomic():
        goods = OversellDemoGoods.objects.select_for_update().get(pk=goods_id)
        if goods.stocks < 1:
            return False
        time.sleep(pause)
        OversellDemoGoods.objects.filter(pk=goods_id).update(stocks=F("stocks") - 1)
    return True


def _buy_seed_redis_lock(goods_id: int, pause: float) -> bool:
    """Seed 000's ``sell3``: the Redis lock is taken and released *inside* the open transaction.

    The next holder reads the row before this commit lands, sees the old stock and sells it again.
    """
    with transaction.atomic():
        with sku_locks([f"oversell-demo-{goods_id}"]):
            stocks = OversellDemoGoods.objects.get(pk=goods_id).stocks
            if stocks < 1:
                return False
            OversellDemoGoods.objects.filter(pk=goods_id).update(stocks=F("stocks") - 1)
        time.sleep(pause)  # the lock is gone, the commit has not happened yet
    return True


_SEED_BUYERS = {
    "naive": _buy_naive,
    "mutex": _buy_mutex,
    "optimistic": _buy_optimistic,
    "pessimistic": _buy_pessimistic,
    "seed_redis_lock": _buy_seed_redis_lock,
}


def _buy_service(sku: str, key: str) -> bool:
    try:
        order_place(email="oversell-demo@example.com", items=[{"sku": sku, "quantity": 1}], idempotency_key=key)
    except DomainError:
        return False
    return True


# --- Running an experiment -----------------------------------------------------------------------


_start_together = None


def _worker_init(barrier) -> None:
    global _start_together
    _start_together = barrier
    connections.close_all()


def _worker(strategy: str, target, attempts: int, pause: float) -> int:
    _start_together.wait(timeout=60)
    sold = 0
    for attempt in range(attempts):
        if strategy == "service":
            sold += _buy_service(target, f"{target}-{uuid.uuid4().hex}-{attempt}")
        else:
            sold += _SEED_BUYERS[strategy](target, pause)
    connections.close_all()
    return sold


def oversell_experiment_run(*, strategy: str, workers: int, stock: int, attempts: int, pause: float):
    """Let ``workers`` processes make ``attempts`` one-unit purchases in all, against ``stock`` units."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}")
    per_worker = [attempts // workers + (1 if i < attempts % workers else 0) for i in range(workers)]
    target, cleanup = _prepare(strategy, stock)
    try:
        ctx = multiprocessing.get_context("fork")  # children inherit the configured settings
        connections.close_all()
        with ctx.Pool(workers, initializer=_worker_init, initargs=(ctx.Barrier(workers),)) as pool:
            sold = sum(pool.starmap(_worker, [(strategy, target, n, pause) for n in per_worker]))
        return ExperimentResult(strategy, attempts, stock, sold, _final_stock(strategy, target))
    finally:
        cleanup()


def _prepare(strategy: str, stock: int):
    """A fresh target per run, so runs never disturb each other or the shop's real stock."""
    if strategy != "service":
        goods = OversellDemoGoods.objects.create(stocks=stock)
        return goods.pk, lambda: goods.delete()
    sku = f"OVERSELL-DEMO-{uuid.uuid4().hex[:8].upper()}"
    name = "Oversell demo (temporary)"
    # Not free: a free order is paid at once, and the demo's orders are to be cancelled, not sold.
    variant = ProductVariant.objects.create(
        product=Product.objects.create(name=name), sku=sku, name=name, price=1, requires_shipping=False
    )
    stock_restock(sku=sku, quantity=stock, reason="oversell_demo")

    def cleanup():
        # Give the units back, then hide the orders with the product (soft delete): the shop's admin and
        # pages show none of the demo's; the ledger keeps the history.
        orders = Order.objects.filter(lines__variant=variant)
        for order in orders.filter(status=Order.Status.AWAITING_PAYMENT):
            order_cancel(order=order)
        orders.delete()
        variant.delete()
        variant.product.delete()

    return sku, cleanup


def _final_stock(strategy: str, target) -> int:
    if strategy == "service":
        return Stock.objects.get(variant__sku=target).available
    return OversellDemoGoods.objects.get(pk=target).stocks
