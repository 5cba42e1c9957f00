import sys

from django.core.management.base import BaseCommand
from django.db import connection
from tqdm import tqdm

from core.commands import int_between
from demo.oversell import STRATEGIES, oversell_experiment_run


class Command(BaseCommand):
    help = (
        "Reproduce the background articles' oversell experiment in real processes against the "
        "configured database: each strategy sells one unit per attempt from --stock units, and the "
        "table shows units sold, stock left, and units oversold or lost. 'all' runs every strategy."
    )

    def add_arguments(self, parser):
        parser.add_argument("--strategy", choices=[*STRATEGIES, "all"], default="all")
        parser.add_argument("--workers", type=int_between(1, 64), default=8, help="buyer processes (8)")
        parser.add_argument("--stock", type=int_between(1, 100_000), default=20, help="units on sale (20)")
        parser.add_argument(
            "--attempts", type=int_between(1, 1_000_000), help="purchases tried in all (default: 3 x stock)"
        )
        parser.add_argument(
            "--pause-ms",
            type=int_between(0, 5_000),
            default=10,
            help="the articles' sleep inside each sale, which widens their race windows (10)",
        )

    def handle(self, *args, strategy, workers, stock, attempts, pause_ms, **options):
        strategies = STRATEGIES if strategy == "all" else [strategy]
        attempts = attempts or 3 * stock
        self.stdout.write(
            f"{connection.vendor} database, {workers} processes, {stock} units, {attempts} attempts, "
            f"pause {pause_ms} ms"
        )
        results = []
        for name in tqdm(strategies, unit="strategy", disable=len(strategies) == 1, file=sys.stderr):
            results.append(
                oversell_experiment_run(
                    strategy=name, workers=workers, stock=stock, attempts=attempts, pause=pause_ms / 1000
                )
            )
        self.stdout.write(
            f"{'strategy':<16} {'attempts':>8} {'sold':>6} {'left':>6} {'oversold':>8} {'lost':>6}  verdict"
        )
        for r in results:
            verdict = self.style.SUCCESS("correct") if r.correct else self.style.ERROR("WRONG")
            self.stdout.write(
                f"{r.strategy:<16} {r.attempts:>8} {r.units_sold:>6} {r.final_stock:>6} {r.oversold:>8} "
                f"{r.lost_updates:>6}  {verdict}"
            )
