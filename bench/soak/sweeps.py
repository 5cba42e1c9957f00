"""Sweeper processes: what Celery beat runs (no Celery worker runs in the soak, so this is also what
releases failed payments)."""

import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta

from django.conf import settings
from django.db import connections

from bench.soak.record import Tally, count_logs
from orders.services import order_release_expired, order_release_failed_payments
from payments.services import payment_list_settle


@dataclass
class SweepTotals:
    passes: int = 0
    done: Counter = field(default_factory=Counter)
    units: Counter = field(default_factory=Counter)
    skipped: Counter = field(default_factory=Counter)

    def add(self, name: str, result) -> str:
        self.done[name] += result.done
        self.units[name] += result.units
        self.skipped[name] += len(result.skipped)
        return "released some" if result.done else "nothing to do"

    def settle(self) -> str:
        settled = payment_list_settle(older_than=timedelta(seconds=settings.PAYMENT_SETTLE_AFTER_SECONDS))
        self.done["charges settled"] += settled
        return "settled some" if settled else "nothing to do"


def sweep_once(tally: Tally, totals: SweepTotals) -> None:
    """What the beat tasks run (orders.tasks.sweep_expired_orders / sweep_failed_payments / settle_payments)."""
    batch = settings.SWEEP_BATCH_SIZE
    tally.run("sweep_expired", lambda: totals.add("expired", order_release_expired(batch_size=batch)))
    tally.run("sweep_failed_payments", lambda: totals.add("failed", order_release_failed_payments(batch_size=batch)))
    tally.run("settle_payments", lambda: totals.settle())
    totals.passes += 1


def sweeper_process(args, number, deadline, out):
    """A sweeper process: a pass every ``--sweep-every`` seconds until ``deadline``, then its totals on ``out``."""
    connections.close_all()
    tally, totals = Tally(f"sweeper {number}"), SweepTotals()
    count_logs(tally)
    time.sleep(number * args.sweep_every / args.sweepers)  # spread the sweepers over the interval
    while time.monotonic() < deadline:
        began = time.monotonic()
        sweep_once(tally, totals)
        time.sleep(max(0.0, args.sweep_every - (time.monotonic() - began)))
    out.put(("sweeper", number, (tally, totals)))
    connections.close_all()
