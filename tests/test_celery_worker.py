"""Real Celery worker and beat processes against the Redis broker and MariaDB (no task_always_eager)."""

import os
import re
import signal
import subprocess
import time
from contextlib import ExitStack, contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from config.celery import app
from inventory.locks import lock_list, sku_locks
from inventory.models import Reservation
from orders.models import Order
from orders.services import order_fail_payment, order_place
from orders.tasks import sweep_expired_orders, sweep_failed_payments
from tests.conftest import assert_books_balance, stock_of
from tests.processes import BIN, ROOT, dies_with_us, process_env, process_state, stop, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

CELERY = str(BIN / "celery")
RELEASE, SWEEP = "orders.tasks.release_order_stock", "orders.tasks.sweep_failed_payments"


@contextmanager
def celery(kind: str, env: dict, log: Path, *args: str):
    """Run ``celery -A config <kind>`` in its own process group; stop it (if still alive) afterwards, or
    when this process ends however it ends (SIGQUIT: a cold shutdown, which ends its pool too)."""
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [CELERY, "-A", "config", kind, "--loglevel=INFO", *args],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=dies_with_us(signal.SIGQUIT),
        )
    try:
        if kind == "worker":
            wait_for(lambda: "ready." in log.read_text(), timeout=60, what=f"worker ready ({log})")
        yield proc
    finally:
        stop(proc)


@pytest.fixture(autouse=True)
def empty_queue():
    """No task leaks into the next test: none queued, none left unacknowledged by a killed worker."""
    forget_every_task()
    yield
    forget_every_task()


def forget_every_task():
    app.control.purge()
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        channel.client.delete(channel.unacked_key, channel.unacked_index_key)


def pool_processes(worker: subprocess.Popen) -> list[int]:
    """The worker's prefork pool: its child processes, which run the tasks."""
    return [int(pid) for pid in Path(f"/proc/{worker.pid}/task/{worker.pid}/children").read_text().split()]


def task_ids(log: Path, task: str, event: str) -> list[str]:
    """The message id of ``task`` at each ``event`` ("received": a delivery, "succeeded") in a worker's log."""
    return re.findall(rf"Task {re.escape(task)}\[([\w-]+)\] {event}", log.read_text())


def queued_for(sku: str) -> int:
    """How many callers are queued for ``sku``'s lock, the dead ones included."""
    return sum(lock["waiters"] for lock in lock_list() if lock["sku"] == sku)


def place(sku, quantity, key):
    return order_place(email=f"{key}@example.com", items=[{"sku": sku, "quantity": quantity}], idempotency_key=key)


def test_beat_and_a_worker_expire_overdue_orders_and_release_failed_payments(make_variant, settings, tmp_path):
    sweep_period = 1.0
    settings.RESERVATION_TTL_SECONDS = 2
    mug = make_variant(sku="MUG", stock=20)
    lost = place("MUG", 3, "lost-task")
    Order.objects.filter(pk=lost.pk).update(status="payment_failed")  # its release task was lost with the broker
    env = process_env(EXPIRY_SWEEP_SECONDS=sweep_period)

    with celery("worker", env, tmp_path / "worker.log", "--concurrency=1"):
        with celery("beat", env, tmp_path / "beat.log", "--schedule", str(tmp_path / "schedule")):
            placed = [place("MUG", 2, f"ttl-{i}") for i in range(5)]
            wait_for(lambda: Order.objects.filter(status="expired").count() == 5, timeout=15, what="orders to expire")
            wait_for(lambda: stock_of(mug).reserved == 0, timeout=15, what="the failed payment's release")

    expired = Order.objects.filter(pk__in=[p.pk for p in placed])
    assert all(order.updated_at >= order.expires_at for order in expired)  # never before they were due
    assert Reservation.objects.get(order_line__order=lost).release_reason == "payment_failed"
    log = (tmp_path / "worker.log").read_text()
    # Only beat's sweeps, run by the worker, expire and release here (how fast is bench/sweep.py's business).
    assert "sweep_expired_orders" in log and "sweep_failed_payments" in log
    assert_books_balance(mug)


def test_a_worker_killed_mid_sweep_loses_nothing_and_releases_nothing_twice(make_variant, tmp_path):
    mug = make_variant(sku="MUG", stock=1000)
    total = 240
    placed = [place("MUG", 1 + i % 3, f"kill-{i}") for i in range(total)]
    Order.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    env = process_env(SWEEP_BATCH_SIZE=10, SWEEP_LEASE_SECONDS=2, EXPIRY_SWEEP_SECONDS=1)

    with celery("worker", env, tmp_path / "first.log", "--concurrency=1") as first:
        sweep_expired_orders.delay()
        wait_for(lambda: Order.objects.filter(status="expired").count() >= 20, timeout=30, what="sweep to start")
        os.killpg(first.pid, signal.SIGKILL)  # the worker and its pool child, mid-sweep
        first.wait(10)
    expired_at_kill = Order.objects.filter(status="expired").count()
    assert 0 < expired_at_kill < total, expired_at_kill

    with celery("worker", env, tmp_path / "second.log", "--concurrency=1"):
        with celery("beat", env, tmp_path / "beat.log", "--schedule", str(tmp_path / "schedule")):
            wait_for(
                lambda: Order.objects.filter(status="expired").count() == total,
                timeout=90,
                what="every order to expire",
            )

    releases = [
        r.movements.filter(kind="release").count() for r in Reservation.objects.filter(order_line__order__in=placed)
    ]
    assert releases == [1] * total  # exactly once each, none lost
    assert stock_of(mug).reserved == 0
    assert_books_balance(mug)


def test_a_task_whose_worker_dies_mid_run_is_delivered_again_and_releases_once(make_variant, settings, tmp_path):
    """Acks late: a failed payment's release task dies mid-run twice, first its pool process alone (the worker
    requeues it at once), then the whole worker (the broker hands it to the next worker once the visibility
    timeout has passed). Beat is off, so only redelivery can run it; the failed-payment sweep then tries the
    same release."""
    visibility = 1
    settings.LOCK_TTL_SECONDS = 120  # our lock outlives both kills
    mug = make_variant(sku="MUG", stock=5)
    failed, kept = place("MUG", 2, "failed"), place("MUG", 3, "kept")  # every unit held
    env = process_env(
        CELERY_VISIBILITY_TIMEOUT=visibility, LOCK_TTL_SECONDS=120, LOCK_WAIT_SECONDS=60, SWEEP_LOCK_WAIT_SECONDS=60
    )
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"

    with ExitStack() as payment_in_flight:
        payment_in_flight.enter_context(sku_locks(["MUG"]))  # a task queues behind it: mid-run, nothing done
        with celery("worker", env, first_log, "--concurrency=1") as first:
            assert order_fail_payment(order=failed)  # its release task is queued on commit
            wait_for(lambda: queued_for("MUG") == 1, timeout=30, what="the release task to start")
            [running] = pool_processes(first)
            os.kill(running, signal.SIGKILL)
            wait_for(lambda: queued_for("MUG") == 2, timeout=30, what="the task to be delivered again")
            os.killpg(first.pid, signal.SIGKILL)  # now the worker and its pool, while the task runs again
            first.wait(10)
        time.sleep(visibility)  # unacknowledged this long, it goes to the next worker that starts

        with celery("worker", env, second_log, "--concurrency=2"):
            wait_for(lambda: queued_for("MUG") == 3, timeout=30, what="the task to be delivered a third time")
            sweep_failed_payments.delay()
            wait_for(lambda: queued_for("MUG") == 4, timeout=30, what="the sweep to start")
            payment_in_flight.close()
            wait_for(
                lambda: task_ids(second_log, RELEASE, "succeeded") and task_ids(second_log, SWEEP, "succeeded"),
                timeout=30,
                what="the task and the sweep to finish",
            )

    task_id = task_ids(first_log, RELEASE, "received")[0]
    assert task_ids(first_log, RELEASE, "received") == [task_id] * 2  # the same message, not a retry
    assert task_ids(second_log, RELEASE, "received") == [task_id]
    released = Reservation.objects.get(order_line__order=failed)
    assert (released.state, released.release_reason) == ("released", "payment_failed")
    assert released.movements.filter(kind="release").count() == 1
    assert Reservation.objects.get(order_line__order=kept).state == "active"
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (5, 3)
    assert_books_balance(mug)


# A test run that starts a worker and the embedded Redis's kind of child (a redis-server), says their pids and
# waits to be killed: as a run stopped from outside (a CI timeout) is.
STARTS_A_WORKER = """
import time
from tests.processes import RedisServer, process_env
from tests.test_celery_worker import celery, pool_processes

def test_starts_a_worker(tmp_path):
    with RedisServer() as redis, celery("worker", process_env(), tmp_path / "worker.log", "--concurrency=2") as worker:
        pids = [worker.pid, *pool_processes(worker), redis.proc.pid]
        (tmp_path.parent / "pids").write_text(" ".join(map(str, pids)))
        time.sleep(600)
"""


def test_the_processes_a_test_run_starts_end_when_it_is_killed(tmp_path):
    """Killed by SIGKILL, pytest runs no fixture's cleanup: its worker and Redis end with it all the same, so no
    leftover worker takes the next run's tasks from the same Redis database."""
    (tmp_path / "test_inner.py").write_text(STARTS_A_WORKER)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = subprocess.Popen(
        [str(BIN / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(ROOT)]
        + ["-c", str(ROOT / "pytest.ini"), "--basetemp", str(tmp_path / "inner"), str(tmp_path / "test_inner.py")],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
        preexec_fn=dies_with_us(signal.SIGKILL),
    )
    pids_file = tmp_path / "inner" / "pids"
    try:
        wait_for(pids_file.exists, timeout=90, what="the inner run's worker and Redis")
        pids = [int(pid) for pid in pids_file.read_text().split()]
        assert len(pids) == 4 and all(process_state(pid) not in ("gone", "Z") for pid in pids)
    finally:
        run.kill()
        run.wait(10)
    wait_for(lambda: all(process_state(pid) in ("gone", "Z") for pid in pids), timeout=30, what="them to end")
