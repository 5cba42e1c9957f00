"""Hosts whose clocks disagree. The web and worker hosts here are real processes whose wall clock is
moved by libfaketime (Debian's ``faketime``): expiry must follow the database's clock, so a worker
running ahead cannot expire an order early, and a web host running behind cannot place an order
that is overdue the moment it is written."""

import json
import subprocess
from datetime import datetime, timedelta

import pytest
from django.conf import settings

from core.clock import db_now
from orders.models import Order
from orders.services import order_place, order_release_expired
from tests.conftest import stock_of
from tests.faults.conftest import assert_books
from tests.processes import ROOT, process_env

pytestmark = pytest.mark.django_db(transaction=True)

SKEW = timedelta(hours=2)


def on_skewed_host(offset: str, code: str) -> dict:
    """Run ``code`` in ``manage.py shell`` with the wall clock moved by ``offset``; it prints one JSON line."""
    script = f"import json\nfrom django.utils import timezone\nclock = timezone.now().isoformat()\n{code}"
    done = subprocess.run(
        ["faketime", "-f", offset, str(ROOT / ".venv" / "bin" / "python"), "manage.py", "shell", "-c", script],
        cwd=ROOT,
        env=process_env(DONT_FAKE_MONOTONIC="1", LOG_LEVEL="WARNING"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_worker_whose_clock_runs_ahead_cannot_expire_an_order_early(make_variant):
    mug = make_variant(sku="MUG", stock=5)
    order = order_place(email="a@example.com", items=[{"sku": "MUG", "quantity": 2}], idempotency_key="k")

    swept = on_skewed_host(
        f"+{SKEW.total_seconds():.0f}s",
        "from orders.models import Order\n"
        "from orders.services import order_expire, order_release_expired\n"
        f"order = Order.objects.get(number={order.number!r})\n"
        "print(json.dumps({'clock': clock, 'expired': order_expire(order=order),\n"
        "    'swept': order_release_expired(batch_size=100).done}))",
    )

    assert datetime.fromisoformat(swept["clock"]) > db_now() + SKEW - timedelta(minutes=5)  # the host is ahead
    assert order.expires_at > db_now() + timedelta(seconds=settings.RESERVATION_TTL_SECONDS - 120)
    assert (swept["expired"], swept["swept"]) == (False, 0)
    assert Order.objects.get(pk=order.pk).status == Order.Status.AWAITING_PAYMENT
    assert stock_of(mug).reserved == 2
    assert_books(mug)


def test_a_web_host_whose_clock_runs_behind_places_orders_that_expire_on_time(make_variant):
    mug = make_variant(sku="MUG", stock=5)

    placed = on_skewed_host(
        f"-{SKEW.total_seconds():.0f}s",
        "from orders.services import order_place\n"
        "order = order_place(email='b@example.com', items=[{'sku': 'MUG', 'quantity': 3}], idempotency_key='k')\n"
        "print(json.dumps({'clock': clock, 'number': order.number}))",
    )
    swept = order_release_expired(batch_size=100).done  # on a host with the right time

    assert datetime.fromisoformat(placed["clock"]) < db_now() - SKEW + timedelta(minutes=5)  # the host is behind
    order = Order.objects.get(number=placed["number"])
    ttl = timedelta(seconds=settings.RESERVATION_TTL_SECONDS)
    assert abs(order.expires_at - (db_now() + ttl)) < timedelta(minutes=2)  # the database's clock, not the host's
    assert swept == 0 and order.status == Order.Status.AWAITING_PAYMENT
    assert stock_of(mug).reserved == 3
    assert_books(mug)
