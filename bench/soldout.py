"""Refusals after a sell-out on one hot SKU: what the flash-sale crowd gets once the units are gone.

Ways to say "none left", side by side at each W, each on a SKU with no unit free:

- the floor's refusal: the guarded UPDATE on the bare table, matching no row (one round trip);
- ours, ``stock_reserve`` (an order's lines at hand, as in the reservation matrix): answered from the
  SKU's sold-out mark, one Redis MGET (the process found it marked lately; its first refusal came
  from the acquire script);
- ours, ``order_place``: the mark, then the look-up of an order placed earlier under the same
  idempotency key (a retry of an order that took the last unit is told its order);
- today's path for each: the marks off (``SOLD_OUT_MARK_SECONDS=0``): queue for the SKU's lock, read
  under it, refuse.

    DATABASE_URL=mysql://root:@127.0.0.1:3306/shop REDIS_URL=redis://127.0.0.1:6379/0 python -m bench.soldout
"""

import argparse
import multiprocessing
import statistics
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection, connections

from bench import reserve  # noqa: I001 - selects the bench database and sets Django up first
from bench.shipping import ADDRESS, bench_shipping_method
from core.errors import DomainError
from inventory.errors import InsufficientStock
from orders.services import order_place

WORKERS = (16, 64)


class FloorRefusal:
    name = "floor: guarded UPDATE matching no row"

    def prepare(self) -> None:
        [self.row] = reserve.bare_rows(1, 0)

    def client_init(self) -> None:
        pass

    def refuse(self) -> bool:
        with connection.cursor() as cursor:
            cursor.execute(reserve.GUARDED, [self.row])
            return cursor.rowcount == 0


class OurOrderRefusal:
    name = "ours: order_place, sold-out mark"
    mark_seconds = settings.SOLD_OUT_MARK_SECONDS  # the shop's setting

    def prepare(self) -> None:
        """A SKU whose one unit the first order took (with the marks on, that commit marks it)."""
        [variant] = reserve.shop_rows(1, 1)
        self.sku = variant.sku
        self.client_init()
        self.method = bench_shipping_method()
        self.place(email="first@example.com", idempotency_key=self.sku)

    def client_init(self) -> None:
        settings.SOLD_OUT_MARK_SECONDS = self.mark_seconds

    def place(self, **kwargs) -> None:
        """One unit, shipped as every bench order is."""
        items = [{"sku": self.sku, "quantity": 1}]
        order_place(items=items, shipping_address=ADDRESS, shipping_method=self.method, **kwargs)

    def refuse(self) -> bool:
        try:
            self.place(email="crowd@example.com", idempotency_key=uuid.uuid4().hex)
        except InsufficientStock:
            return True
        return False


class TodaysOrderRefusal(OurOrderRefusal):
    name = "today's path: order_place, marks off"
    mark_seconds = 0


class OurReserveRefusal(OurOrderRefusal):
    name = "ours: stock_reserve, sold-out mark"

    def prepare(self) -> None:
        """An order placed beforehand on a SKU with no unit (its first refusal, under the lock, marks it)."""
        self.reserving = reserve.OurStockReserve()
        self.reserving.prepare(reserve.WORKLOADS["hot"], 1, 0)
        self.client_init()
        self.refuse()

    def refuse(self) -> bool:
        try:
            self.reserving.buy([0])
        except reserve.Refused:
            return True
        return False


class TodaysReserveRefusal(OurReserveRefusal):
    name = "today's path: stock_reserve, marks off"
    mark_seconds = 0


DESIGNS = [FloorRefusal, OurReserveRefusal, TodaysReserveRefusal, OurOrderRefusal, TodaysOrderRefusal]


@dataclass
class RefusalCell:
    design: str
    workers: int
    round: int = 0
    refusals: int = 0
    elapsed: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    errors: Counter = field(default_factory=Counter)

    @property
    def rate(self) -> float:
        return self.refusals / self.elapsed if self.elapsed else 0.0


def _client(design, barrier, duration, out) -> None:
    connections.close_all()  # never share the parent's socket
    design.client_init()
    design.refuse()  # untimed: connections and scripts set up
    barrier.wait()
    latencies, errors, start = [], Counter(), time.monotonic()
    while time.monotonic() - start < duration:
        began = time.monotonic()
        try:
            refused = design.refuse()
            errors["sold (a unit was left!)"] += not refused
        except DomainError as exc:
            errors[exc.code] += 1
        latencies.append(time.monotonic() - began)
    out.put((start, time.monotonic(), latencies, errors))
    connections.close_all()


@dataclass
class Timed:
    """What W forked clients did in their timed phase: per client its answers counted, and together the
    calls made, the phase's length and the latencies' median and 99th percentile."""

    answers: list[Counter]
    calls: int
    elapsed: float
    p50_ms: float
    p99_ms: float


def clients_timed(client, design, workers: int, duration: float) -> Timed:
    """Fork ``workers`` processes running ``client(design, barrier, duration, out)``, each putting (start, end,
    latencies, answers) on ``out``; start them together and gather what they timed."""
    ctx = multiprocessing.get_context("fork")
    connections.close_all()
    barrier, out = ctx.Barrier(workers), ctx.Queue()
    procs = [ctx.Process(target=client, args=(design, barrier, duration, out)) for _ in range(workers)]
    for proc in procs:
        proc.start()
    results = [out.get(timeout=duration + 120) for _ in procs]
    for proc in procs:
        proc.join(30)
    latencies = sorted(lat for _, _, lats, _ in results for lat in lats)
    return Timed(
        answers=[answers for *_, answers in results],
        calls=len(latencies),
        elapsed=max(end for _, end, *_ in results) - min(start for start, *_ in results),
        p50_ms=statistics.median(latencies) * 1000,
        p99_ms=latencies[max(int(len(latencies) * 0.99) - 1, 0)] * 1000,
    )


def run_cell(design_class, workers: int, duration: float) -> RefusalCell:
    design = design_class()
    design.prepare()
    timed = clients_timed(_client, design, workers, duration)
    cell = RefusalCell(design.name, workers, elapsed=timed.elapsed, p50_ms=timed.p50_ms, p99_ms=timed.p99_ms)
    for errors in timed.answers:
        cell.errors.update(errors)
    cell.refusals = timed.calls - cell.errors["sold (a unit was left!)"]
    return cell


def run_refusals(*, workers=WORKERS, duration: float = 3.0, rounds: int = 3, progress=print) -> list[RefusalCell]:
    """Every design at every W, side by side, ``rounds`` times over (the report takes medians)."""
    reserve.reset_database()
    cells = []
    for round_ in range(rounds):
        for count in workers:
            for design_class in DESIGNS:
                cell = run_cell(design_class, count, duration)
                cell.round = round_
                progress(
                    f"sold out W={count:<3} {cell.design:40} {cell.rate:8.0f} refusals/s "
                    f"p50 {cell.p50_ms:6.1f} ms  p99 {cell.p99_ms:6.1f} ms  errors {dict(cell.errors) or '-'}"
                )
                cells.append(cell)
    settings.SOLD_OUT_MARK_SECONDS = OurOrderRefusal.mark_seconds
    return cells


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=list(WORKERS))
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per cell")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    cells = run_refusals(workers=args.workers, duration=args.duration, rounds=args.rounds)
    print("\n".join(refusal_table(cells)))


def medians(cells: list[RefusalCell]) -> dict[tuple[int, str], dict]:
    """Per (W, design): the median refusal rate, p50 and p99 over the rounds."""
    grouped: dict[tuple[int, str], list[RefusalCell]] = {}
    for cell in cells:
        grouped.setdefault((cell.workers, cell.design), []).append(cell)
    return {
        key: {
            "rate": statistics.median(c.rate for c in group),
            "rates": [c.rate for c in group],
            "p50_ms": statistics.median(c.p50_ms for c in group),
            "p99_ms": statistics.median(c.p99_ms for c in group),
            "errors": sum((c.errors for c in group), Counter()),
        }
        for key, group in grouped.items()
    }


# Ours, against today's path for the same service.
TODAYS_PATH_OF = {OurReserveRefusal.name: TodaysReserveRefusal.name, OurOrderRefusal.name: TodaysOrderRefusal.name}


def refusal_table(cells: list[RefusalCell]) -> list[str]:
    """Markdown rows: per W and design, refusals/s with its ratios to the floor and to today's path."""
    found = medians(cells)
    rows = [
        "| W | design | refusals/s: median (rounds) | x floor | x today's path | p50 ms | p99 ms | other answers |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (workers, design), m in found.items():
        floor = found[(workers, FloorRefusal.name)]["rate"]
        today = found[(workers, TODAYS_PATH_OF[design])]["rate"] if design in TODAYS_PATH_OF else None
        rounds = ", ".join(f"{rate:,.0f}" for rate in m["rates"])
        others = {code: n for code, n in m["errors"].items() if n} or "-"
        over_today = f"{m['rate'] / today:.2f}x" if today else "-"
        rows.append(
            f"| {workers} | {design} | {m['rate']:,.0f} ({rounds}) | {m['rate'] / floor:.2f}x "
            f"| {over_today} | {m['p50_ms']:.1f} | {m['p99_ms']:.1f} | {others} |"
        )
    return rows


if __name__ == "__main__":
    main()
