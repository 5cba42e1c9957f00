"""Successful payments racing a busy hot-SKU lock, and a Redis outage, in real processes.

Every success ends applied (its order paid, the payment captured) or, if its order truly cannot be
paid (cancelled, or expired with its units sold to another buyer), refunded exactly once; none is
refunded because the stock lock was only busy or unreachable.

Workers stand in for Celery's: each receives its successes as the webhook endpoint does (stored once; a
provider's redelivery finds the event stored) and runs the real task, ``process_payment_event``, on it.
On an error the task retries on (``orders.tasks.RETRYABLE``) it schedules the event again after
``backoff * 2**retries`` seconds, at most ``max_retries`` times, as ``autoretry_for``, ``retry_backoff``
and ``max_retries`` do, on a shorter clock. What every retry missed, the beat's sweeps pick up
(``payment_event_list_process`` and ``payment_list_settle``), each run again and again in a process of
its own, racing the other.

Refunds are counted at the provider, across processes: ``LedgerProvider`` appends every refund asked of
it to a file, under the idempotency key the Stripe provider sends (``refund-<reference>``). Stripe
refunds a key once, so a payment was refunded as many times as it has distinct keys there. The same
key asked again is a replay, reported in the figures: the claim before asking accepts a payment already
``refunding``, so two deliveries processed at once may both ask, and a refund interrupted after the
provider was asked (the lock busy for its last step) is asked again by the settle sweep that finishes it.
"""

import os
import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from core.errors import DomainError
from inventory.locks import sku_locks
from orders.models import Order
from orders.services import order_cancel, order_expire, order_place
from orders.tasks import RETRYABLE
from payments.models import Payment, PaymentEvent
from payments.providers.local import local_event
from payments.services import order_pay, payment_event_list_process, payment_event_receive, payment_list_settle
from payments.tasks import process_payment_event
from tests.conftest import stock_of
from tests.faults.conftest import assert_books
from tests.payments import RETURN_URL, RecordingProvider
from tests.processes import wait_for
from tests.race import run_parallel, wait_for_peers
from tests.test_celery_worker import forget_every_task

pytestmark = pytest.mark.django_db(transaction=True)

HOT, RECEIVED = "HOT", 120
WORKERS = 4  # each success is delivered twice, by two of them
PAYABLE, CANCELLED, EXPIRED = 16, 2, 2
LATE_UNITS = 20  # an expired order's units; fewer than that are left once another buyer took them
STORM_MOST = 10  # the storm's orders, one unit each
LEFT = STORM_MOST + 5  # units left once another buyer took the expired orders': never sold out, never enough
State, Status = Payment.State, Order.Status


class LedgerProvider(RecordingProvider):
    """The local provider (recorded), whose refunds also go to a file every process appends to."""

    ledger = ""  # set before the processes fork

    def refund(self, *, payment, amount=None, key=""):
        super().refund(payment=payment, amount=amount, key=key)
        with open(LedgerProvider.ledger, "a") as ledger:  # one short append: whole lines, whoever writes
            ledger.write(f"{key or f'refund-{payment.reference}'}\n")


@pytest.fixture
def refunds_asked(provider, settings, tmp_path):
    """Make ``LedgerProvider`` the shop's provider; a function counting each idempotency key asked."""
    settings.PAYMENT_PROVIDERS = {**settings.PAYMENT_PROVIDERS, "local": f"{__name__}.LedgerProvider"}
    LedgerProvider.ledger = str(tmp_path / "refunds")
    Path(LedgerProvider.ledger).touch()
    return lambda: Counter(Path(LedgerProvider.ledger).read_text().split())


@pytest.fixture(autouse=True)
def empty_queue():
    """The endpoint queues a task per event on the broker; the workers here run them instead."""
    forget_every_task()
    yield
    forget_every_task()


@pytest.fixture
def signals(tmp_path) -> Path:
    """Where the processes tell each other (and the test) what they are at: a file per signal."""
    path = tmp_path / "signals"
    path.mkdir()
    return path


def orders_paying(make_variant):
    """Orders of the hot SKU, each with a payment started: those that can be paid, and those that
    cannot any more by the time their success arrives (cancelled; expired, their units sold since).

    Returns the SKU's product, the payable payments, and the unpayable ones with their order's status.
    """
    hot = make_variant(sku=HOT, stock=RECEIVED)

    def started(key: str, quantity: int) -> Payment:
        order = order_place(email=f"{key}@example.com", items=[{"sku": HOT, "quantity": quantity}], idempotency_key=key)
        return order_pay(order=order, return_url=RETURN_URL)

    payable = [started(f"good-{n}", 1 + n % 2) for n in range(PAYABLE)]
    cancelled = [started(f"cancelled-{n}", 1) for n in range(CANCELLED)]
    expired = [started(f"expired-{n}", LATE_UNITS) for n in range(EXPIRED)]
    for payment in cancelled:
        order_cancel(order=payment.order)
    Order.objects.filter(pk__in=[p.order_id for p in expired]).update(expires_at=timezone.now() - timedelta(seconds=5))
    for payment in expired:
        assert order_expire(order=payment.order)
    taken = stock_of(hot).available - LEFT  # another buyer takes the units they gave back
    order_place(email="later@example.com", items=[{"sku": HOT, "quantity": taken}], idempotency_key="later")
    assert stock_of(hot).available == LEFT < LATE_UNITS
    unpayable = [(p, Status.CANCELLED) for p in cancelled] + [(p, Status.EXPIRED) for p in expired]
    return hot, payable, unpayable


def deliveries(payments: list[Payment]) -> list[list[int]]:
    """Each success delivered twice (a provider redelivers), by two different workers, shuffled."""
    shares = [[] for _ in range(WORKERS)]
    for n, payment in enumerate(payments):
        shares[n % WORKERS].append(payment.pk)
        shares[(n + 1) % WORKERS].append(payment.pk)
    shuffle = random.Random(31).shuffle
    for share in shares:
        shuffle(share)
    return shares


def _done(signals: str, kind: str = "done") -> int:
    return len(list(Path(signals).glob(f"{kind}-*")))


def _worker(*, name, payment_ids, signals, pace, backoff, max_retries, backoff_max=60.0, start_after=""):
    """Receive each payment's success (one every ``pace`` seconds) and run its task at once; retry it as
    the task's autoretry does. Returns what the tries gave: an error's name, ``done`` (first try) or
    ``done_on_retry``, and ``gave_up`` for events whose retries ran out (also signalled as a file, as is
    the worker's end: ``done-<name>``)."""
    wait_for_peers()
    if start_after:
        wait_for(Path(start_after).exists, timeout=30, what="the lock to be busy")
    started = time.monotonic()
    due = [(started + n * pace, pk, None, 0) for n, pk in enumerate(payment_ids)]  # (when, payment, event, retries)
    tries = Counter()
    while due:
        due.sort(key=lambda entry: entry[0])
        when, pk, event_id, retries = due.pop(0)
        time.sleep(max(0.0, when - time.monotonic()))
        if event_id is None:  # the webhook arrives: the endpoint stores it (once) and queues its task
            event = local_event("checkout.session.completed", payment=Payment.objects.get(pk=pk))
            payment_event_receive(provider="local", event=event)
            event_id = PaymentEvent.objects.get(event_id=event["id"]).pk
        try:
            process_payment_event(event_id)  # the task itself, run as a worker runs it
        except RETRYABLE as exc:
            tries[type(exc).__name__] += 1
            if retries < max_retries:
                countdown = min(backoff * 2**retries, backoff_max)
                due.append((time.monotonic() + countdown, pk, event_id, retries + 1))
            else:
                tries["gave_up"] += 1
                Path(signals, f"gave-up-{os.getpid()}-{pk}").touch()
        else:
            tries["done_on_retry" if retries else "done"] += 1
    Path(signals, f"done-{name}").touch()
    return tries


def _holder(*, signals, hold, releases):
    """Another buyer's long section on the hot SKU, again and again: the lock is let go ``releases``
    times, each time for those queued then (at most one try per worker), then held until the workers
    are done. Returns how many times it held the lock."""
    wait_for_peers()
    holds = 0
    while _done(signals) < WORKERS:
        with sku_locks([HOT], wait=60):
            holds += 1
            Path(signals, "held").touch()
            deadline = time.monotonic() + hold
            while (holds > releases or time.monotonic() < deadline) and _done(signals) < WORKERS:
                time.sleep(0.02)
    return holds


def _storm(*, signals):
    """Buyers of the hot SKU, a unit each, until the workers are done; a refusal is retried with the same key."""
    wait_for_peers()
    told = Counter()
    while told["placed"] < STORM_MOST and _done(signals) < WORKERS:
        try:
            order_place(
                email="storm@example.com",
                items=[{"sku": HOT, "quantity": 1}],
                idempotency_key=f"storm-{told['placed']}",
            )
            told["placed"] += 1
        except DomainError as exc:
            told[exc.code] += 1
        time.sleep(0.05)
    return told


def _unsettled() -> bool:
    return (
        PaymentEvent.objects.filter(processed_at=None).exists()
        or Payment.objects.filter(state__in=[State.CHARGED, State.REFUNDING]).exists()
    )


def _sweeper(*, sweep, seconds=30):
    """One of the beat's sweeps, run again and again until nothing is left to settle. How many runs."""
    wait_for_peers()
    runs, deadline = 0, time.monotonic() + seconds
    while _unsettled() and time.monotonic() < deadline:
        if sweep == "events":
            payment_event_list_process(older_than=timedelta(0))
        else:
            payment_list_settle(older_than=timedelta(0))
        runs += 1
        time.sleep(0.05)
    return runs


ROLES = {"worker": _worker, "holder": _holder, "storm": _storm, "sweeper": _sweeper}


def _play(role, **kwargs):
    return ROLES[role](**kwargs)


def workers_and(payable, unpayable, signals: Path, others: list[dict], *, budgets: list[int], **retry) -> list[dict]:
    """The jobs: the workers ``w0``, ``w1``... (``budgets``: each one's ``max_retries``), with every
    success shuffled among them, then ``others``."""
    payments = payable + [payment for payment, _ in unpayable]
    random.Random(7).shuffle(payments)
    work = {"role": "worker", "signals": str(signals), **retry}
    return [
        {**work, "name": f"w{n}", "max_retries": budget, "payment_ids": share}
        for n, (budget, share) in enumerate(zip(budgets, deliveries(payments), strict=True))
    ] + others


def sweep_until_settled() -> list[int]:
    """The event sweep and the settle sweep, in two processes at once, until every charge is settled."""
    jobs = [{"role": "sweeper", "sweep": "events"}, {"role": "sweeper", "sweep": "settle"}]
    return run_parallel(_play, jobs, processes=2, barrier=True, timeout=120)


def assert_no_good_payment_refunded(payable, unpayable, refunds_asked) -> None:
    """While charges wait: a payable order's payment is charged (waiting) or captured (its order paid),
    never refunded nor refunding; only unpayable payments were refunded, and their orders stayed as they were."""
    asked = {key.removeprefix("refund-") for key in refunds_asked()}
    wrongly = asked - {payment.reference for payment, _ in unpayable}
    assert not wrongly, f"{len(wrongly)} of {len(payable)} payable orders' payments refunded"
    for payment in Payment.objects.filter(pk__in=[p.pk for p in payable]).select_related("order"):
        waiting = (payment.state, payment.order.status) == (State.CHARGED, Status.AWAITING_PAYMENT)
        applied = (payment.state, payment.order.status) == (State.CAPTURED, Status.PAID)
        assert (waiting or applied) and payment.amount_refunded == 0, (payment.state, payment.order.status)
    for payment, status in unpayable:
        payment = Payment.objects.select_related("order").get(pk=payment.pk)
        assert payment.state in (State.CHARGED, State.REFUNDING, State.REFUNDED) and payment.order.status == status


def assert_every_charge_settled(hot, payable, unpayable, refunds_asked) -> Counter:
    """Each payable order paid with its payment, captured; each unpayable payment refunded once, its
    order as it was; every event processed; the books balance, nothing oversold. The refunds asked."""
    for payment in Payment.objects.filter(pk__in=[p.pk for p in payable]).select_related("order"):
        assert (payment.state, payment.amount_refunded) == (State.CAPTURED, 0), payment.reference
        assert (payment.order.status, payment.order.payment_reference) == (Status.PAID, payment.reference)
    for payment, status in unpayable:
        payment = Payment.objects.select_related("order").get(pk=payment.pk)
        assert (payment.state, payment.amount_refunded) == (State.REFUNDED, payment.amount), payment.reference
        assert payment.order.status == status and payment.order.payment_reference != payment.reference
    asked = refunds_asked()
    assert set(asked) == {f"refund-{payment.reference}" for payment, _ in unpayable}  # once each, none other
    assert Payment.objects.count() == PAYABLE + CANCELLED + EXPIRED  # no second attempt was started
    assert PaymentEvent.objects.count() == PAYABLE + CANCELLED + EXPIRED  # a redelivery was stored once
    assert not PaymentEvent.objects.filter(processed_at=None).exists()
    sold = sum(line.quantity for payment in payable for line in payment.order.lines.all())
    assert stock_of(hot).on_hand == RECEIVED - sold  # each paid order's units committed once
    assert_books(hot)
    return asked


def test_successes_while_the_hot_skus_lock_is_busy_are_applied_or_refunded_once_never_refunded_for_waiting(
    make_variant, refunds_asked, signals, settings
):
    """Another section holds the hot SKU's lock far longer than LOCK_WAIT_SECONDS, letting it go three
    times, while four workers take 40 successes (20 payments, each delivered twice) and a storm of
    orders queues for the same lock. Tries time out and are retried; the retries apply what gets
    through, the sweeps the rest."""
    settings.LOCK_WAIT_SECONDS = 0.2
    hot, payable, unpayable = orders_paying(make_variant)
    holder = {"role": "holder", "signals": str(signals), "hold": 1.0, "releases": 3}
    storm = {"role": "storm", "signals": str(signals)}
    retry = {"pace": 0.1, "backoff": 0.25, "start_after": str(signals / "held")}
    jobs = workers_and(payable, unpayable, signals, [holder, storm], budgets=[3] * WORKERS, **retry)
    started = time.monotonic()

    *tries, holds, stormed = run_parallel(_play, jobs, processes=len(jobs), barrier=True, timeout=120)

    assert_no_good_payment_refunded(payable, unpayable, refunds_asked)
    tries = sum(tries, Counter())
    assert tries["LockTimeout"] >= WORKERS and tries["gave_up"] > 0, tries  # the lock was busy; retries ran out
    assert set(tries) <= {"LockTimeout", "gave_up", "done", "done_on_retry"}, tries  # no other error
    assert 2 <= holds <= 4  # at most three releases, each letting through at most one try per worker
    waiting = Payment.objects.filter(state=State.CHARGED).count()
    assert waiting > 0  # some 15 tries at most got through for 20 payments: the rest wait, charged
    sweeps = sweep_until_settled()
    asked = assert_every_charge_settled(hot, payable, unpayable, refunds_asked)
    print(
        f"\nlock busy: {PAYABLE + CANCELLED + EXPIRED} payments, 2 deliveries each; tries {dict(tries)}; "
        f"{waiting} left charged for the sweeps ({sweeps} runs); storm {dict(stormed)}; "
        f"refunds {len(asked)} (requests {sum(asked.values())}); {time.monotonic() - started:.1f}s"
    )


def test_successes_while_redis_is_down_wait_charged_and_are_applied_or_refunded_once_when_it_is_back(
    make_variant, refunds_asked, signals, settings, private_redis_settings
):
    """Redis (the locks' only home) is killed while successes arrive, some already applied: every try
    fails with LockUnavailable and its charge waits, charged, with no refund. Two workers' retries run
    out during the outage (a budget of one retry), the other two's last beyond it (eight, as the task's):
    once Redis is back at the same address, the same long-lived workers' retries apply every charge they
    can still reach, and the sweeps the charges both of whose deliveries gave up. (With LOCK_DB_FALLBACK off:
    on, the charges are applied under the stock rows' locks meanwhile, as test_redis_outage.py shows.)"""
    redis = private_redis_settings
    settings.LOCK_WAIT_SECONDS = 1.0
    settings.LOCK_DB_FALLBACK = False
    hot, payable, unpayable = orders_paying(make_variant)
    storm = {"role": "storm", "signals": str(signals)}
    retry = {"pace": 0.15, "backoff": 0.25, "backoff_max": 1.0}
    jobs = workers_and(payable, unpayable, signals, [storm], budgets=[1, 1, 8, 8], **retry)
    short_budgets_only = set(jobs[0]["payment_ids"]) & set(jobs[1]["payment_ids"])
    started = time.monotonic()

    def charged() -> set[int]:
        return set(Payment.objects.filter(state=State.CHARGED).values_list("pk", flat=True))

    with ThreadPoolExecutor(1) as background:
        running = background.submit(run_parallel, _play, jobs, processes=len(jobs), barrier=True, timeout=120)
        try:
            wait_for(
                lambda: Payment.objects.filter(state=State.CAPTURED).count() >= 3 or running.done(),
                timeout=30,
                what="the first successes to apply",
            )
            redis.kill()
            down = Payment.objects.filter(state=State.CAPTURED).count()
            wait_for(
                lambda: (
                    running.done()
                    or not Payment.objects.filter(state=State.PENDING).exists()
                    and Path(signals, "done-w0").exists()
                    and Path(signals, "done-w1").exists()
                ),
                timeout=30,
                what="every success to arrive, and the short retry budgets to run out",
            )
            charged_while_down = charged()
            assert_no_good_payment_refunded(payable, unpayable, refunds_asked)
        finally:
            if redis.proc.poll() is not None:
                redis.start()  # the same address; no process is restarted
        *tries, stormed = running.result()

    tries = sum(tries, Counter())
    assert PAYABLE + CANCELLED + EXPIRED > down >= 3  # Redis died mid-stream
    assert tries["LockUnavailable"] >= len(charged_while_down) > len(short_budgets_only), tries
    assert set(tries) <= {"LockUnavailable", "LockTimeout", "gave_up", "done", "done_on_retry"}, tries
    assert tries["done_on_retry"] > 0  # the retries after the restart applied what they could reach
    assert_no_good_payment_refunded(payable, unpayable, refunds_asked)
    left = charged()
    assert left == charged_while_down & short_budgets_only and left  # and only those wait, for the sweeps
    sweeps = sweep_until_settled()
    asked = assert_every_charge_settled(hot, payable, unpayable, refunds_asked)
    print(
        f"\nredis down: {PAYABLE + CANCELLED + EXPIRED} payments, 2 deliveries each; {down} applied before the "
        f"kill, {len(charged_while_down)} charged while down; tries {dict(tries)}; {len(left)} left for the "
        f"sweeps ({sweeps} runs); storm {dict(stormed)}; refunds {len(asked)} (requests {sum(asked.values())}); "
        f"{time.monotonic() - started:.1f}s"
    )
