"""A flash crowd on a voucher: W client processes place one-unit orders on one hot SKU, side by side:

- without a voucher (the same orders as the reservation matrix's ``order_place``);
- with a voucher that never runs out (every order gets the discount: what the voucher's row lock,
  counters and ledger rows cost);
- with a voucher of 100 uses (the first 100 orders get it; the rest are refused ``used_up``).

Each cell starts on a fresh SKU and a fresh voucher. Over-redeemed counts uses beyond the limit, from
the answers (orders told they got the discount) and from the rows (the voucher's counters and its uses).

    DATABASE_URL=mysql://root:@127.0.0.1:3306/shop REDIS_URL=redis://127.0.0.1:6379/0 python -m bench.vouchers
"""

import argparse
import statistics
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal

from django.db import connections

from bench import reserve, soldout  # noqa: I001 - selects the bench database and sets Django up first
from bench.shipping import ADDRESS, bench_shipping_method
from core.errors import DomainError
from orders.models import Order
from orders.services import order_place
from vouchers.models import Voucher, VoucherUse

WORKERS = (16, 64)
LIMITED = 100


class NoVoucher:
    name = "order_place, no voucher"
    usage_limit: int | None = None
    code = ""

    def prepare(self) -> None:
        [variant] = reserve.shop_rows(1, 1_000_000)
        self.sku, self.method = variant.sku, bench_shipping_method()
        if type(self) is not NoVoucher:
            self.code = f"V{uuid.uuid4().hex[:12].upper()}"
            Voucher.objects.create(code=self.code, kind="percentage", value=Decimal(10), usage_limit=self.usage_limit)

    def place(self, voucher: str | None = None) -> str:
        """One order, with the design's voucher unless ``voucher`` is given; what its buyer was told:
        "discounted", "placed" or the refusal's reason or code."""
        try:
            order = order_place(
                email=f"{uuid.uuid4().hex[:12]}@example.com",
                items=[{"sku": self.sku, "quantity": 1}],
                idempotency_key=uuid.uuid4().hex,
                shipping_address=ADDRESS,
                shipping_method=self.method,
                voucher=self.code if voucher is None else voucher,
            )
        except DomainError as refusal:
            return refusal.payload.get("reason", refusal.code)
        return "discounted" if order.discount else "placed"

    def redeemed(self) -> tuple[int, int]:
        """Uses held by the voucher's counters, and its orders (uses in its ledger)."""
        if not self.code:
            return 0, 0
        voucher = Voucher.objects.get(code=self.code)
        in_ledger = VoucherUse.objects.filter(voucher=voucher, state__in=["reserved", "committed"]).count()
        return voucher.uses_reserved + voucher.uses_committed, in_ledger


class UnlimitedVoucher(NoVoucher):
    name = "order_place, voucher never used up"
    usage_limit = 10_000_000


class LimitedVoucher(NoVoucher):
    name = f"order_place, {LIMITED}-use voucher raced"
    usage_limit = LIMITED


DESIGNS = [NoVoucher, UnlimitedVoucher, LimitedVoucher]


@dataclass
class VoucherCell:
    design: str
    workers: int
    usage_limit: int | None
    round: int = 0
    answers: Counter = field(default_factory=Counter)
    elapsed: float = 0.0
    p50_ms: float = 0.0
    p99_ms: float = 0.0
    uses_counted: int = 0  # the voucher's counters
    uses_in_ledger: int = 0
    orders_discounted: int = 0  # orders in the database with the voucher's discount

    @property
    def rate(self) -> float:
        """Answers per second: orders placed and refused."""
        return sum(self.answers.values()) / self.elapsed if self.elapsed else 0.0

    @property
    def over_redeemed(self) -> int:
        if self.usage_limit is None:
            return 0
        told = self.answers["discounted"]
        return max(0, max(told, self.uses_counted, self.uses_in_ledger, self.orders_discounted) - self.usage_limit)


def _client(design, barrier, duration, out) -> None:
    connections.close_all()  # never share the parent's socket
    design.place(voucher="")  # untimed, without the voucher (its uses stay for the crowd): connections set up
    barrier.wait()
    latencies, answers, start = [], Counter(), time.monotonic()
    while time.monotonic() - start < duration:
        began = time.monotonic()
        answers[design.place()] += 1
        latencies.append(time.monotonic() - began)
    out.put((start, time.monotonic(), latencies, answers))
    connections.close_all()


def run_cell(design_class, workers: int, duration: float) -> VoucherCell:
    design = design_class()
    design.prepare()
    timed = soldout.clients_timed(_client, design, workers, duration)
    cell = VoucherCell(
        design.name, workers, design.usage_limit, elapsed=timed.elapsed, p50_ms=timed.p50_ms, p99_ms=timed.p99_ms
    )
    for answers in timed.answers:
        cell.answers.update(answers)
    cell.uses_counted, cell.uses_in_ledger = design.redeemed()
    if design.code:
        cell.orders_discounted = Order.objects.filter(voucher_code=design.code, discount__gt=0).count()
    return cell


def run_vouchers(*, workers=WORKERS, duration: float = 3.0, rounds: int = 3, progress=print) -> list[VoucherCell]:
    """Every design at every W, side by side, ``rounds`` times over (the report takes medians)."""
    reserve.reset_database()
    cells = []
    for round_ in range(rounds):
        for count in workers:
            for design_class in DESIGNS:
                reserve.wait_for_quiet_machine()
                cell = run_cell(design_class, count, duration)
                cell.round = round_
                progress(
                    f"voucher W={count:<3} {cell.design:36} {cell.rate:7.0f} answers/s  p99 {cell.p99_ms:6.1f} ms  "
                    f"{dict(cell.answers)}  uses {cell.uses_counted}/{cell.uses_in_ledger}  "
                    f"over-redeemed {cell.over_redeemed}"
                )
                cells.append(cell)
    return cells


def voucher_table(cells: list[VoucherCell]) -> list[str]:
    """Markdown rows: per W and design, the median answers/s over the rounds and its ratio to the same
    orders without a voucher, what the buyers were told, and the uses over the limit (every round)."""
    grouped: dict[tuple[int, str], list[VoucherCell]] = {}
    for cell in cells:
        grouped.setdefault((cell.workers, cell.design), []).append(cell)
    rows = [
        "| W | design | answers/s: median (rounds) | x no voucher | p99 ms | told (all rounds) | uses held "
        "(counters / ledger / discounted orders, per round) | over-redeemed |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for (workers, design), group in grouped.items():
        rate = statistics.median(c.rate for c in group)
        plain = statistics.median(c.rate for c in grouped[(workers, NoVoucher.name)])
        told = sum((c.answers for c in group), Counter())
        uses = "; ".join(f"{c.uses_counted} / {c.uses_in_ledger} / {c.orders_discounted}" for c in group)
        rows.append(
            f"| {workers} | {design} | {rate:,.0f} ({', '.join(f'{c.rate:,.0f}' for c in group)}) "
            f"| {rate / plain:.2f}x | {statistics.median(c.p99_ms for c in group):.1f} "
            f"| {', '.join(f'{answer} {n:,}' for answer, n in sorted(told.items()))} "
            f"| {uses if group[0].usage_limit else '-'} | {sum(c.over_redeemed for c in group)} |"
        )
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=list(WORKERS))
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per cell")
    parser.add_argument("--rounds", type=int, default=1)
    args = parser.parse_args()
    cells = run_vouchers(workers=args.workers, duration=args.duration, rounds=args.rounds)
    print("\n".join(voucher_table(cells)))


if __name__ == "__main__":
    main()
