"""A soak run: the catalog, the processes started and replaced, the faults done to them, the wind-down."""

import argparse
import multiprocessing
import os
import queue
import random
import shutil
import signal
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import connections
from django.db.models import Max
from django.utils import timezone

from bench.soak.books import Check, books_check, checker_process, say_check
from bench.soak.record import FAULT_KINDS, FAULT_UNTIL, Fault, Tally, count_logs, say
from bench.soak.report import report
from bench.soak.sweeps import SweepTotals, sweep_once, sweeper_process
from bench.soak.traffic import STOCK_START, read_journal, worker_process
from inventory.services import stock_restock
from orders.models import Order
from orders.selectors import order_list_final_holding_stock, order_list_overdue
from shop.models import Product, ProductVariant
from tests.processes import RedisServer, process_state

Status = Order.Status


def catalog(args: argparse.Namespace) -> tuple[dict[str, list[str]], int]:
    """Products with opening stock put in through the service (so the ledger has it), and a staff user."""
    call_command("migrate", verbosity=0)
    staff = get_user_model().objects.create_user("soak-staff", password=None, is_staff=True)
    rng = random.Random(args.seed)
    skus = {
        "hot": [f"SOAK-HOT-{n}" for n in range(args.hot)],
        "cold": [f"SOAK-{n:04d}" for n in range(args.skus - args.hot)],
    }
    for temperature, names in skus.items():
        for sku in names:
            # Not shipped: the soak's traffic drives the stock engine, not the checkout's addresses.
            name = f"Soak {sku}"
            ProductVariant.objects.create(
                product=Product.objects.create(name=name),
                sku=sku,
                name=name,
                price=rng.randint(1, 50),
                requires_shipping=False,
            )
            stock_restock(sku=sku, quantity=STOCK_START[temperature], reason="soak: opening stock", actor=staff)
    return skus, staff.pk


class Run:
    """The soak's processes, started and replaced here, and the faults done to them."""

    def __init__(self, args: argparse.Namespace, redis: RedisServer, skus, staff_id):
        self.args, self.redis = args, redis
        self.ctx = multiprocessing.get_context("fork")
        self.skus, self.staff_id = skus, staff_id
        self.out = self.ctx.Queue()
        self.pause = self.ctx.Value("i", 0)  # 1: stop the next holder; then the stopped worker's pid
        self.journals = Path(tempfile.mkdtemp(prefix="soak-journals-"))
        self.workers: dict[int, multiprocessing.Process] = {}
        self.sweepers: dict[int, multiprocessing.Process] = {}
        self.killed: set[int] = set()  # pids the faults killed: they report nothing
        self.faults: list[Fault] = []
        self.rng = random.Random(args.seed)
        # A fault's effects last until the locks it left behind expire and their waiters give up.
        self.aftermath = settings.LOCK_TTL_SECONDS + settings.LOCK_WAIT_SOCKET_TIMEOUT_SECONDS

    def _start(self, target, *arguments) -> multiprocessing.Process:
        """A process running ``target(the run's arguments, *arguments)``."""
        proc = self.ctx.Process(target=target, args=(self.args, *arguments))
        proc.start()
        return proc

    def start_worker(self) -> int:
        number = len(self.workers)
        self.workers[number] = self._start(
            worker_process,
            number,
            self.skus,
            self.staff_id,
            self.deadline,
            self.journals / f"worker-{number}",
            self.pause,
            self.out,
        )
        return number

    def start_sweeper(self) -> int:
        number = len(self.sweepers)
        self.sweepers[number] = self._start(sweeper_process, number, self.deadline, self.out)
        return number

    def run(self) -> dict:
        connections.close_all()
        self.started = time.monotonic()
        self.deadline = self.started + self.args.minutes * 60
        for _ in range(self.args.workers):
            self.start_worker()
        for _ in range(self.args.sweepers):
            self.start_sweeper()
        checker = self._start(checker_process, self.started, self.deadline, self.out)
        self.inject_faults()
        return self.collect([*self.workers.values(), *self.sweepers.values(), checker])

    # Faults ---------------------------------------------------------------------------------

    def inject_faults(self) -> None:
        """Each kind ``--fault-rounds`` times, spread evenly over the traffic; one that cannot finish a
        lock's TTL before the traffic ends is recorded as not injected (and fails the run)."""
        plan = [kind for _ in range(self.args.fault_rounds) for kind in FAULT_KINDS]
        span = self.deadline - self.started
        for n, kind in enumerate(plan):
            time.sleep(max(0.0, self.started + span * (n + 1) / (len(plan) + 1) - time.monotonic()))
            began = time.monotonic()
            if began > self.deadline - settings.LOCK_TTL_SECONDS - 5:
                self.faults.append(Fault(kind, began - self.started, 0.0, "not injected: traffic ending", False))
                continue
            FAULT_UNTIL.value = float("inf")
            detail, injected = getattr(self, kind)()
            ended = time.monotonic()
            FAULT_UNTIL.value = ended + self.aftermath
            self.faults.append(Fault(kind, began - self.started, ended - began, detail, injected))
            say(self.started, f"fault {kind}: {detail}")

    def redis_restart(self) -> tuple[str, bool]:
        self.redis.kill()
        time.sleep(self.args.redis_down)
        self.redis.start()
        return f"down {self.args.redis_down:g} s, restarted empty", True

    def _kill(self, procs: dict[int, multiprocessing.Process], role: str, replace) -> tuple[str, bool]:
        number, proc = self.rng.choice([(n, p) for n, p in procs.items() if p.is_alive()])
        os.kill(proc.pid, signal.SIGKILL)
        proc.join()
        self.killed.add(proc.pid)
        return f"{role} {number} (pid {proc.pid}) SIGKILLed; {role} {replace()} started", True

    def kill_web(self) -> tuple[str, bool]:
        return self._kill(self.workers, "worker", self.start_worker)

    def kill_sweeper(self) -> tuple[str, bool]:
        return self._kill(self.sweepers, "sweeper", self.start_sweeper)

    def pause_holder(self) -> tuple[str, bool]:
        self.pause.value = 1
        give_up = time.monotonic() + 30
        while self.pause.value == 1 and time.monotonic() < give_up:
            time.sleep(0.01)
        with self.pause.get_lock():
            pid = self.pause.value
            if pid == 1:
                self.pause.value = 0
                return "no worker reached a one-SKU reservation within 30 s", False
        while process_state(pid) != "T" and time.monotonic() < give_up:
            time.sleep(0.01)
        stopped = time.monotonic()
        time.sleep(settings.LOCK_TTL_SECONDS + 2)
        os.kill(pid, signal.SIGCONT)
        self.pause.value = 0
        return (
            f"worker pid {pid} stopped {time.monotonic() - stopped:.1f} s holding a SKU's lock "
            f"(lock TTL {settings.LOCK_TTL_SECONDS:g} s), then resumed",
            True,
        )

    # Results --------------------------------------------------------------------------------

    def collect(self, procs) -> dict:
        results = defaultdict(list)
        reported = {}
        for _ in [proc for proc in procs if proc.pid not in self.killed]:
            try:
                role, number, result = self.out.get(timeout=max(self.deadline + 120 - time.monotonic(), 1))
            except queue.Empty:
                break
            reported[(role, number)] = result
        lost = 0
        for proc in procs:
            proc.join(5)
            if proc.pid in self.killed:
                continue
            if proc.is_alive() or proc.exitcode:
                lost += 1
                proc.kill()
                proc.join()
        results["worker"] = [
            read_journal(self.journals / f"worker-{number}", reported.get(("worker", number)))
            for number in self.workers
        ]
        results["sweeper"] = [result for (role, _), result in reported.items() if role == "sweeper"]
        results["checker"] = [result for (role, _), result in reported.items() if role == "checker"]
        shutil.rmtree(self.journals)
        results["seconds"] = time.monotonic() - self.started
        results["lost processes"] = lost
        results["killed processes"] = len(self.killed)
        results["started"] = self.started
        results["faults"] = self.faults
        return results


def wind_down(args: argparse.Namespace, started: float) -> tuple[Tally, SweepTotals, Check]:
    """Let the last reservations expire, sweep until nothing is left, then check with no grace."""
    tally, totals = Tally("final sweep"), SweepTotals()
    count_logs(tally)
    last_expiry = Order.all_objects.filter(status=Status.AWAITING_PAYMENT).aggregate(last=Max("expires_at"))["last"]
    if last_expiry:
        wait = min((last_expiry - timezone.now()).total_seconds() + 1, args.ttl + 5)
        say(started, f"waiting {max(wait, 0):.1f} s for the last reservations to expire")
        time.sleep(max(wait, 0))
    give_up = time.monotonic() + args.lease + 10  # orders a sweep skipped stay leased this long
    while True:
        sweep_once(tally, totals)
        left = order_list_overdue().exists() or order_list_final_holding_stock().exists()
        if not left or time.monotonic() > give_up:
            break
        time.sleep(1)
    final = books_check(at=time.monotonic() - started, grace=0)
    say_check(started, "final check", final)
    return tally, totals, final


def soak_run(args: argparse.Namespace, redis: RedisServer) -> int:
    """The whole soak on the services ``environment.soak_services_use`` set up; 1 if anything went wrong."""
    skus, staff_id = catalog(args)
    results = Run(args, redis, skus, staff_id).run()
    started = results["started"]
    problems = []
    if results["lost processes"]:
        problems.append(f"{results['lost processes']} process(es) died or hung")
    final_tally, final_sweeps, final = wind_down(args, started)
    path, problems = report(args, results, final_tally, final_sweeps, final, problems)
    say(started, f"wrote {path}")
    for problem in problems:
        print(f"FAIL: {problem}", file=sys.stderr)
    return 1 if problems else 0
