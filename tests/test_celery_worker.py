"""Real Celery worker and beat processes against the Redis broker and MariaDB (no task_always_eager)."""

import os
import signal
import subprocess
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from config.celery import app
from inventory.models import Reservation
from orders.models import Order
from orders.services import order_place
from orders.tasks import sweep_expired_orders
from tests.conftest import assert_books_balance, stock_of
from tests.processes import BIN, ROOT, process_env, stop, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

CELERY = str(BIN / "celery")


@contextmanager
def celery(kind: str, env: dict, log: Path, *args: str):
    """Run ``celery -A config <kind>`` in its own process group; stop it (if still alive) afterwards."""
    with open(log, "w") as out:
        proc = subprocess.Popen(
            [CELERY, "-A", "config", kind, "--loglevel=INFO", *args],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        if kind == "worker":
            wait_for(lambda: "ready." in log.read_text(), timeout=60, what=f"worker ready ({log})")
        yield proc
    finally:
        stop(proc)


@pytest.fixture(autouse=True)
def empty_queue():
    app.control.purge()
    yield
    app.control.purge()


def place(sku, quantity, key):
    return order_place(email=f"{key}@example.com", items=[{"sku": sku, "quantity": quantity}], idempotency_key=key)


def test_beat_and_a_worker_expire_orders_within_one_sweep_period(make_product, settings, tmp_path):
    sweep_period = 1.0
    settings.RESERVATION_TTL_SECONDS = 2
    mug = make_product(sku="MUG", stock=20)
    env = process_env(EXPIRY_SWEEP_SECONDS=sweep_period)

    with celery("worker", env, tmp_path / "worker.log", "--concurrency=1"):
        with celery("beat", env, tmp_path / "beat.log", "--schedule", str(tmp_path / "schedule")):
            placed = [place("MUG", 2, f"ttl-{i}") for i in range(5)]
            wait_for(lambda: Order.objects.filter(status="expired").count() == 5, timeout=15, what="orders to expire")

    lags = [(o.updated_at - o.expires_at).total_seconds() for o in Order.objects.filter(pk__in=[p.pk for p in placed])]
    assert all(0 <= lag <= sweep_period + 0.5 for lag in lags), lags  # one period, plus dispatch
    assert stock_of(mug).reserved == 0
    assert "sweep_expired_orders" in (tmp_path / "worker.log").read_text()
    assert_books_balance(mug)


def test_a_worker_killed_mid_sweep_loses_nothing_and_releases_nothing_twice(make_product, tmp_path):
    mug = make_product(sku="MUG", stock=1000)
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
