"""The shop under the drop bench: its processes, fixtures, CPU and books (imported once ``bench.drop.__main__``
has set Django up on the bench's database).

Processes as production runs them (docs/deploy.md): gunicorn on production settings (``bench.drop.settings``;
``bench.http_load.Server``, on a port of 8100-8199), the drops' push process (``uvicorn config.push:app``:
the line's join, place reads and streams), the line's runner (``manage.py drop_line``) and a Celery
worker that applies the payment webhooks; here too a fake Stripe API (``tests.stripe_fake``) and a
sweep of lapsed holds every ``SWEEP_SECONDS`` (what beat's sweep does, more often, so a window of 30 s
gives its units back within the run).
"""

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from datetime import timedelta
from http.server import ThreadingHTTPServer
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import close_old_connections
from django.db.models import Sum
from django.utils import timezone
from knox.models import AuthToken, get_digest_token
from knox.settings import CONSTANTS, knox_settings
from redis import Redis

from bench.http_load import BIN, ROOT, THREADS, Server
from bench.reserve import server_cpu, units_given_and_taken
from drops import line
from drops.models import Drop, DropVariant
from inventory.variants import variant_create
from orders.models import PAID_STATUSES, Order, OrderLine
from orders.services import order_release_expired
from payments.models import PaymentEvent
from tests.stripe_fake import FakeStripe

logger = logging.getLogger(__name__)

APP_PORT, STRIPE_PORT, PUSH_PORT = 8101, 8102, 8103
PUSH_BACKLOG = 4096  # a crowd's joins arrive a thousand a second: the kernel queues them, not refuses them
WEBHOOK_SECRET = "whsec_dropbench_run_only"
SWEEP_SECONDS = 1.0
REDIS_DBS = (12, 13)  # the shop's (locks, cache, the line) and the Celery broker's: emptied at the start
PRICE = "40.00"
LOGS = ROOT / "var" / "drop-logs"  # each process's log of the last run (var/ is not committed)


def production_env() -> dict:
    """What production needs set (config.settings_production), for plain HTTP on loopback and a fake Stripe."""
    return {
        "DJANGO_SETTINGS_MODULE": "bench.drop.settings",
        "ALLOWED_HOSTS": "127.0.0.1",
        "SECURE_SSL_REDIRECT": "0",
        "SESSION_COOKIE_SECURE": "0",
        "CSRF_COOKIE_SECURE": "0",
        "SECURE_HSTS_SECONDS": "0",
        "PAYMENT_PROVIDER": "stripe",
        "STRIPE_SECRET_KEY": "sk_test_dropbench",
        "STRIPE_WEBHOOK_SECRET": WEBHOOK_SECRET,
        "STRIPE_API_BASE": f"http://127.0.0.1:{STRIPE_PORT}",
        "EMAIL_URL": "dummymail://",
        "CELERY_BROKER_URL": os.environ["CELERY_BROKER_URL"],
        "RESERVATION_TTL_SECONDS": os.environ["RESERVATION_TTL_SECONDS"],
        "DROP_ADMISSIONS_PER_SECOND": os.environ["DROP_ADMISSIONS_PER_SECOND"],
    }


def reset() -> None:
    """An empty database (migrated) and empty Redis databases: ids start again, and so do the lines' keys."""
    call_command("migrate", verbosity=0)
    call_command("flush", interactive=False, verbosity=0)
    for db in REDIS_DBS:
        Redis.from_url(f"{settings.REDIS_URL.rsplit('/', 1)[0]}/{db}").flushdb()


def buyers_create(count: int) -> list[str]:
    """``count`` accounts with one API token each, in bulk: knox stores a digest, computed here as its
    manager computes it, and one INSERT takes a thousand rows (its ``create`` takes one row a round trip)."""
    users = get_user_model().objects.bulk_create(
        (
            get_user_model()(username=f"drop{n:05d}", email=f"drop{n:05d}@example.com", password="!")
            for n in range(count)
        ),
        batch_size=2000,
    )
    tokens, rows, expiry = [], [], timezone.now() + knox_settings.TOKEN_TTL
    for user in users:
        digest, token = get_digest_token()
        tokens.append(token)
        rows.append(AuthToken(digest=digest, token_key=token[: CONSTANTS.TOKEN_KEY_LENGTH], user=user, expiry=expiry))
    AuthToken.objects.bulk_create(rows, batch_size=2000)
    return tokens


def sizes_create(tag: str, *, sizes: int, units: int, sale_starts_at=None) -> list:
    """One product in ``sizes`` variants of ``units`` each (the restock ledgered)."""
    first = variant_create(
        sku=f"{tag}-1", name=f"{tag} size 1", price=PRICE, initial_stock=units, sale_starts_at=sale_starts_at
    )
    rest = [
        variant_create(
            sku=f"{tag}-{n}",
            name=f"{tag} size {n}",
            price=PRICE,
            product=first.product,
            initial_stock=units,
            sale_starts_at=sale_starts_at,
        )
        for n in range(2, sizes + 1)
    ]
    return [first, *rest]


def drop_create(name: str, variants: list, *, line_on: bool, window: int) -> Drop:
    """A drop of ``variants``, its line open since a minute ago."""
    drop = Drop.objects.create(
        name=name, line_opens_at=timezone.now() - timedelta(minutes=1), checkout_window_seconds=window, line_on=line_on
    )
    DropVariant.objects.bulk_create(DropVariant(drop=drop, variant=variant) for variant in variants)
    return drop


def proc_cpu(pid: int, *, reaped: bool = False) -> float:
    """CPU seconds (user and system) of process ``pid``, with its reaped children's if ``reaped``: /proc."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11 : 15 if reaped else 13]) / os.sysconf("SC_CLK_TCK")


class Shop:
    """The shop's processes, started on entering and stopped on leaving; ``cpu()`` reads what each spent."""

    def __enter__(self):
        self.stripe = ThreadingHTTPServer(("127.0.0.1", STRIPE_PORT), FakeStripe)
        threading.Thread(target=self.stripe.serve_forever, daemon=True).start()
        self.server = Server(workers=2 * os.cpu_count(), threads=THREADS, **production_env())
        self.server.port, self.server.url = APP_PORT, f"http://127.0.0.1:{APP_PORT}"
        self.server.__enter__()
        LOGS.mkdir(parents=True, exist_ok=True)
        for old in LOGS.glob("*.log"):
            old.unlink()
        push = [BIN / "uvicorn", "config.push:app", "--host", "127.0.0.1", "--port", str(PUSH_PORT)]
        self.push = self._start("push", push + ["--no-access-log", "--backlog", str(PUSH_BACKLOG)])
        self.push_url = f"http://127.0.0.1:{PUSH_PORT}"
        self._push_wait()
        self.runner, self.runner_restarts, self.runner_cpu_before = self._runner(), [], 0.0
        celery = [BIN / "celery", "-A", "config", "worker", "--pool", "solo", "--loglevel", "WARNING"]
        self.worker = self._start("worker", celery)
        self.stopping = threading.Event()
        self.sweeper = threading.Thread(target=self._sweep, daemon=True)
        self.sweeper.start()
        return self

    def _push_wait(self, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(self.push_url + "/", timeout=1)
            except urllib.error.HTTPError:
                return  # it answers (404 at /)
            except OSError:
                if time.monotonic() > deadline or self.push.poll() is not None:
                    raise RuntimeError("the push process did not start (var/drop-logs/push.log)") from None
                time.sleep(0.2)

    def _runner(self) -> subprocess.Popen:
        return self._start("runner", [BIN / "python", "manage.py", "drop_line"])

    def _start(self, name: str, command: list) -> subprocess.Popen:
        log = open(LOGS / f"{name}.log", "ab")  # noqa: SIM115 - the child writes it until the end
        return subprocess.Popen(command, cwd=ROOT, env=self.server.env, stdout=log, stderr=subprocess.STDOUT)

    def _sweep(self) -> None:
        """Expire lapsed holds and unpaid orders, as beat's sweep does: their units go back to the line.
        And start the runner again if it died, as a process supervisor does (each restart is reported)."""
        runner_cpu = 0.0
        while not self.stopping.wait(SWEEP_SECONDS):
            if self.runner.poll() is None:
                runner_cpu = proc_cpu(self.runner.pid)
            else:
                self.runner_restarts.append(time.time())
                self.runner_cpu_before, self.runner = self.runner_cpu_before + runner_cpu, self._runner()
            try:
                order_release_expired(batch_size=500)
            except Exception:  # the next pass tries again; the run must not lose its sweep
                logger.exception("sweep failed")
            finally:
                close_old_connections()

    def __exit__(self, *exc):
        self.stopping.set()
        self.sweeper.join(10)
        for proc in (self.runner, self.worker, self.push):
            proc.terminate()
            proc.wait(20)
        # Requests still queued would hold gunicorn's graceful stop past Server's wait: stop it at once.
        self.server.proc.send_signal(signal.SIGQUIT)
        self.server.log.seek(0)
        (LOGS / "gunicorn.log").write_bytes(self.server.log.read())
        try:
            self.server.proc.wait(20)
        except subprocess.TimeoutExpired:  # a worker stuck past SIGQUIT: the run's figures are taken already
            self.server.proc.kill()
        self.server.__exit__(*exc)
        self.stripe.shutdown()
        self.stripe.server_close()

    def gunicorn_pids(self) -> list[int]:
        master = self.server.proc.pid
        with open(f"/proc/{master}/task/{master}/children") as children:
            return [int(pid) for pid in children.read().split()]

    def cpu(self) -> dict:
        """CPU seconds so far: gunicorn (the master, its workers and the workers it reaped), the push process,
        the runner, the Celery worker, MariaDB and Redis."""
        workers = sum(proc_cpu(pid) for pid in self.gunicorn_pids())
        return {
            "gunicorn": proc_cpu(self.server.proc.pid, reaped=True) + workers,
            "push": proc_cpu(self.push.pid),
            "runner": self.runner_cpu_before + (proc_cpu(self.runner.pid) if self.runner.poll() is None else 0.0),
            "worker": proc_cpu(self.worker.pid),
        } | server_cpu()

    def news_wait(self, drop: Drop, timeout: float = 30) -> None:
        """Until the runner has published the drop's news (the line takes no one before)."""
        deadline = time.monotonic() + timeout
        while line.news(drop_id=drop.pk) is None:
            if time.monotonic() > deadline or self.runner.poll() is not None:
                raise RuntimeError("the line's runner published no news")
            time.sleep(0.2)

    def crowd(self, plan: dict) -> dict:
        """Run ``bench.drop.crowd`` on ``plan``; its result, with the shop's CPU spent meanwhile (``cpu``) and
        how often the runner died and was started again."""
        with tempfile.TemporaryDirectory(prefix="dropcrowd-") as tmp:
            plan_path, out_path = Path(tmp) / "plan.json", Path(tmp) / "out.json"
            shop = {"url": self.server.url, "push_url": self.push_url, "webhook_secret": WEBHOOK_SECRET}
            plan_path.write_text(json.dumps(plan | shop))
            before, restarts = self.cpu(), len(self.runner_restarts)
            subprocess.run([sys.executable, "-m", "bench.drop.crowd", plan_path, out_path], cwd=ROOT, check=True)
            after = self.cpu()
            result = json.loads(out_path.read_text())
        cpu = {name: after[name] - before[name] for name in after}
        return result | {"cpu": cpu, "runner_restarts": len(self.runner_restarts) - restarts}


def events_settled(timeout: float = 60) -> int:
    """Wait until the worker has applied every stored payment event; how many are left (0 when all are)."""
    deadline = time.monotonic() + timeout
    while (left := PaymentEvent.objects.filter(processed_at__isnull=True).count()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def books(variants: list) -> dict:
    """The units given (restock ledger), paid (lines of paid orders) and taken (active and committed
    reservation rows), and what was oversold by either count: from the database, never the counters."""
    given_taken = units_given_and_taken(variants)
    paid = OrderLine.objects.filter(variant__in=variants, order__status__in=PAID_STATUSES).aggregate(n=Sum("quantity"))
    given, taken = sum(g for g, _ in given_taken), sum(t for _, t in given_taken)
    paid_by_variant = dict(
        OrderLine.objects.filter(variant__in=variants, order__status__in=PAID_STATUSES)
        .values_list("variant_id")
        .annotate(n=Sum("quantity"))
    )
    oversold_paid = sum(
        max(0, paid_by_variant.get(v.pk, 0) - g) for v, (g, _) in zip(variants, given_taken, strict=True)
    )
    return {
        "stock": given,
        "paid": paid["n"] or 0,
        "taken": taken,
        "oversold": oversold_paid + sum(max(0, t - g) for g, t in given_taken),
    }


def placed_times(variants: list) -> dict[str, float]:
    """When each order for ``variants`` was placed (for a drop: its holds), by number, as epoch seconds."""
    placed = Order.all_objects.filter(lines__variant__in=variants).values_list("number", "created_at")
    return {number: at.timestamp() for number, at in placed}


def payments_applied(records: list[dict]) -> None:
    """A buyer's ``paid`` stands once its order is paid in the database (the webhook applied while the
    units were still its own); otherwise it says what the order became (``paid late: expired``)."""
    numbers = [r["order"] for r in records if r["final"] == "paid"]
    statuses = dict(Order.all_objects.filter(number__in=numbers).values_list("number", "status"))
    for record in records:
        if record["final"] == "paid" and statuses.get(record["order"]) not in PAID_STATUSES:
            record["final"] = f"paid late: {statuses.get(record['order'])}"
