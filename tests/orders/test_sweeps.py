"""Sweeps on real MariaDB + Redis: bounded, exactly once, never a paid order, never blocked by one bad order."""

import threading
from collections import Counter
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import orders.services.sweeps
from core.errors import DomainError
from inventory.models import Reservation, Stock
from orders.models import Order, OrderLine
from orders.services import (
    order_cancel,
    order_fail_payment,
    order_place,
    order_release_expired,
    order_release_failed_payments,
)
from orders.services.lifecycle import order_list_expire
from orders.tasks import release_order_stock, sweep_expired_orders, sweep_failed_payments
from payments.models import Payment
from tests.conftest import assert_books_balance, pay, sold_out_marks_lapse, stock_of
from tests.processes import wait_for
from tests.race import holding, run_parallel, wait_for_peers


def place(sku, quantity, key):
    return order_place(email=f"{key}@example.com", items=[{"sku": sku, "quantity": quantity}], idempotency_key=key)


def make_overdue(*orders_):
    """Time passes past these orders' expiry (and their reservations', which share it)."""
    past = timezone.now() - timedelta(seconds=1)
    Order.objects.filter(pk__in=[o.pk for o in orders_]).update(expires_at=past)
    Reservation.objects.filter(order_line__order__in=[o.pk for o in orders_]).update(expires_at=past)
    sold_out_marks_lapse()


def releases_per_reservation():
    return {r.pk: r.movements.filter(kind="release").count() for r in Reservation.objects.all()}


@pytest.mark.django_db(transaction=True)
def test_the_sweep_expires_overdue_orders_in_batches_and_never_a_paid_one(make_variant):
    mug = make_variant(sku="MUG", stock=50)
    overdue = [place("MUG", 2, f"o{i}") for i in range(7)]
    fresh = place("MUG", 1, "fresh")
    paid = pay(place("MUG", 1, "paid"))
    make_overdue(*overdue, paid)

    sweep = order_release_expired(batch_size=3)

    assert (sweep.done, sweep.units, sweep.skipped) == (7, 14, [])
    assert set(Order.objects.filter(status="expired").values_list("pk", flat=True)) == {o.pk for o in overdue}
    assert Order.objects.get(pk=fresh.pk).status == "awaiting_payment"
    assert Order.objects.get(pk=paid.pk).status == "paid"
    assert stock_of(mug).reserved == 1
    assert order_release_expired(batch_size=3).done == 0
    assert_books_balance(mug)


@pytest.mark.django_db(transaction=True)
def test_one_bad_order_does_not_stop_the_batch_and_a_busy_one_is_retried_later(make_variant, settings, monkeypatch):
    settings.SWEEP_LOCK_WAIT_SECONDS = 0.2
    settings.SWEEP_LEASE_SECONDS = 30  # lapsed by hand below
    mug, tee = make_variant(sku="MUG", stock=10), make_variant(sku="TEE", stock=10)
    bad, busy, good = place("MUG", 1, "bad"), place("TEE", 1, "busy"), place("MUG", 1, "good")
    make_overdue(bad, busy, good)
    real_expire = orders.services.sweeps.order_expire

    def expire_or_break(*, order):
        if order.pk == bad.pk:
            raise RuntimeError("corrupt row")
        return real_expire(order=order)

    monkeypatch.setattr(orders.services.sweeps, "order_expire", expire_or_break)
    with holding(["TEE"]):  # a payment in flight holds TEE
        sweep = order_release_expired(batch_size=10)

    assert sweep.done == 1 and sorted(sweep.skipped) == sorted([bad.number, busy.number])
    assert Order.objects.get(pk=good.pk).status == "expired"

    monkeypatch.setattr(orders.services.sweeps, "order_expire", real_expire)
    assert order_release_expired(batch_size=10).done == 0  # still leased: not retried at once
    Order.objects.update(sweep_lease_until=timezone.now() - timedelta(seconds=1))  # the lease lapses
    assert order_release_expired(batch_size=10).done == 2
    assert_books_balance(mug, tee)


@pytest.mark.django_db(transaction=True)
def test_a_section_expires_its_orders_with_the_same_statements_however_many_they_are(make_variant, settings):
    """Set-based: a fixed number of statements per stock section, not per order."""
    settings.SWEEP_SECTION_ORDERS = 100
    for n in range(4):
        make_variant(sku=f"SKU{n}", stock=500)

    def statements_to_sweep(orders: int) -> int:
        make_overdue(*[place(f"SKU{n % 4}", 1 + n % 3, f"o{orders}-{n}") for n in range(orders)])
        with CaptureQueriesContext(connection) as queries:
            assert order_release_expired(batch_size=100).done == orders
        return len(queries)

    assert statements_to_sweep(10) == statements_to_sweep(60)
    assert Reservation.objects.filter(state="active").count() == 0
    assert_books_balance(*[Stock.objects.get(variant__sku=f"SKU{n}").variant for n in range(4)])


@pytest.mark.django_db(transaction=True)
def test_a_claimed_batch_is_expired_a_few_orders_per_section(make_variant, settings, monkeypatch):
    """A buyer of a swept SKU waits for one section at most: SWEEP_SECTION_ORDERS orders, not the batch."""
    settings.SWEEP_SECTION_ORDERS = 10
    mug = make_variant(sku="MUG", stock=100)
    make_overdue(*[place("MUG", 1, f"o{i}") for i in range(35)])
    sections = []
    real = orders.services.sweeps.order_list_expire
    monkeypatch.setattr(
        orders.services.sweeps, "order_list_expire", lambda **kw: sections.append(len(kw["orders"])) or real(**kw)
    )

    assert order_release_expired(batch_size=200).done == 35

    assert sections == [10, 10, 10, 5]
    assert_books_balance(mug)


@pytest.mark.django_db(transaction=True)
def test_an_order_the_batch_cannot_expire_is_left_and_the_rest_expired(make_variant):
    """Expired at once, a batch re-reads what is due under its locks: one paid or cancelled since the
    claim is left as it is, the others expired."""
    mug = make_variant(sku="MUG", stock=20)
    overdue = [place("MUG", 1, f"o{i}") for i in range(4)]
    make_overdue(*overdue)
    claimed = list(Order.objects.filter(pk__in=[o.pk for o in overdue]).prefetch_related("lines__variant"))
    order_cancel(order=overdue[1])

    expired = order_list_expire(orders=claimed)

    assert sorted(o.pk for o in expired) == sorted(o.pk for o in overdue if o.pk != overdue[1].pk)
    assert Order.objects.get(pk=overdue[1].pk).status == "cancelled"
    assert set(releases_per_reservation().values()) == {1}
    assert stock_of(mug).reserved == 0
    assert_books_balance(mug)


@pytest.mark.django_db(transaction=True)
def test_a_counter_holding_fewer_reserved_units_than_a_section_releases_stops_only_its_orders(make_variant):
    """The counters' guard: a SKU whose count has drifted below what its reservations hold (a lost lock, a
    hand edit) refuses the whole section, which writes nothing; its orders then go one by one, and only the
    drifted SKU's order is left (skipped, for reconcile to report), with its reservation, status and ledger
    as they were."""
    mug, cup = make_variant(sku="MUG", stock=20), make_variant(sku="CUP", stock=20)
    on_mug, on_cup = place("MUG", 2, "on-mug"), place("CUP", 2, "on-cup")
    make_overdue(on_mug, on_cup)
    Stock.objects.filter(variant=mug).update(reserved=1)  # drifted: its reservation holds 2

    sweep = order_release_expired(batch_size=10)

    assert (sweep.done, sweep.skipped) == (1, [on_mug.number])
    assert Order.objects.get(pk=on_mug.pk).status == "awaiting_payment"
    assert Reservation.objects.get(order_line__order=on_mug).state == "active"
    assert not stock_of(mug).movements.filter(kind="release").exists()
    assert stock_of(mug).reserved == 1
    assert Order.objects.get(pk=on_cup.pk).status == "expired"
    assert stock_of(cup).reserved == 0
    assert_books_balance(cup)


@pytest.mark.django_db(transaction=True)
def test_a_sweeper_locks_only_the_candidates_it_read_and_passes_over_those_another_holds(make_variant):
    """The claim reads its candidates without locks, then locks them by primary key (SKIP LOCKED): a
    locking walk over the overdue orders locked every row it passed, more than MariaDB's lock memory
    holds once a drop leaves a hundred thousand carts (it aborted the server)."""
    mug = make_variant(sku="MUG", stock=100)
    overdue = [place("MUG", 1, f"o{i}") for i in range(30)]
    make_overdue(*overdue)
    held, release = threading.Event(), threading.Event()

    def another_sweeper_holds_the_first_twenty():
        try:
            with transaction.atomic():
                list(Order.objects.filter(pk__in=[o.pk for o in overdue[:20]]).select_for_update())
                held.set()
                release.wait(10)
        finally:
            connection.close()

    other = threading.Thread(target=another_sweeper_holds_the_first_twenty)
    other.start()
    assert held.wait(10)
    with CaptureQueriesContext(connection) as queries:
        sweep = order_release_expired(batch_size=10)
    release.set()
    other.join(10)

    assert sweep.done == 10
    assert set(Order.objects.filter(status="expired").values_list("pk", flat=True)) == {o.pk for o in overdue[20:]}
    locking = [q["sql"] for q in queries if "SKIP LOCKED" in q["sql"]]
    assert locking and all("`orders_order`.`id` IN (" in sql for sql in locking)
    assert_books_balance(mug)


def _sweep(batch_size):
    return order_release_expired(batch_size=batch_size).done


@pytest.mark.django_db(transaction=True)
def test_several_sweepers_at_once_release_every_order_exactly_once(make_variant):
    mug = make_variant(sku="MUG", stock=500)
    make_overdue(*[place("MUG", 1, f"o{i}") for i in range(120)])

    done = run_parallel(_sweep, [{"batch_size": 10}] * 4, processes=4, barrier=True)
    # An order whose SKU another sweeper held past the sweep's short lock wait is skipped, as designed,
    # and left to the next run once its lease lapses: that run releases exactly what was skipped.
    Order.objects.update(sweep_lease_until=timezone.now() - timedelta(seconds=1))
    later = _sweep(batch_size=10)

    assert sum(done) + later == 120 and sum(done) > later  # the parallel sweepers did most of it
    assert Order.objects.filter(status="expired").count() == 120
    assert set(releases_per_reservation().values()) == {1}
    assert_books_balance(mug)


TASKS = {task.name: task for task in (release_order_stock, sweep_failed_payments, sweep_expired_orders)}


def _deliver(task, args):
    """Run one delivery of ``task`` as a worker's pool process would, at the same moment as the others."""
    wait_for_peers()
    return TASKS[task].apply(args=args).get()


@pytest.mark.django_db(transaction=True)
def test_the_same_task_delivered_several_times_at_once_releases_nothing_twice(make_variant, settings):
    """Acks late delivers a task at least once: a failed payment's release, delivered four times, races the
    sweeps that would also release it, each of them twice."""
    settings.SWEEP_LOCK_WAIT_SECONDS = settings.LOCK_WAIT_SECONDS  # a sweeper queues with the others, never skips
    mug = make_variant(sku="MUG", stock=5)
    failed = place("MUG", 3, "failed")
    Order.objects.filter(pk=failed.pk).update(status="payment_failed")  # marked; its task is "in the queue"
    overdue = place("MUG", 2, "late")  # every unit held
    make_overdue(overdue)
    jobs = (
        [{"task": release_order_stock.name, "args": [failed.pk]}] * 4
        + [{"task": sweep_failed_payments.name, "args": []}] * 2
        + [{"task": sweep_expired_orders.name, "args": []}] * 2
    )

    answers = run_parallel(_deliver, jobs, processes=len(jobs), barrier=True)

    assert answers[:4] == [1] * 4  # each delivery answers with the order's one released reservation
    assert sum(answers[4:6]) <= 1 and sum(answers[6:]) == 1  # a sweep claims an order once
    reasons = {r.order_line.order_id: r.release_reason for r in Reservation.objects.select_related("order_line")}
    assert reasons == {failed.pk: "payment_failed", overdue.pk: "expired"}
    assert set(releases_per_reservation().values()) == {1}
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (5, 0)
    assert_books_balance(mug)


@pytest.mark.django_db(transaction=True)
def test_the_failed_payment_sweep_catches_a_release_that_was_never_run(make_variant):
    mug = make_variant(sku="MUG", stock=10)
    order = place("MUG", 4, "lost-task")
    Order.objects.filter(pk=order.pk).update(status="payment_failed")  # the task was lost with the broker

    sweep = order_release_failed_payments(batch_size=10)

    assert (sweep.done, sweep.units) == (1, 4)
    assert Reservation.objects.get().release_reason == "payment_failed"
    assert order_release_failed_payments(batch_size=10).done == 0
    assert_books_balance(mug)


@pytest.mark.django_db(transaction=True)
def test_with_no_sweeper_the_last_units_held_by_overdue_orders_still_sell(make_variant):
    mug = make_variant(sku="MUG", stock=5)
    make_overdue(place("MUG", 3, "late-1"), place("MUG", 2, "late-2"))
    assert stock_of(mug).available == 0

    order = place("MUG", 5, "buyer")

    assert order.status == "awaiting_payment"
    assert Order.objects.filter(status="expired").count() == 2
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (5, 5)
    assert_books_balance(mug)


@pytest.mark.django_db(transaction=True)
def test_overdue_orders_are_expired_even_when_the_new_order_is_still_refused(make_variant):
    mug = make_variant(sku="MUG", stock=5)
    make_overdue(place("MUG", 2, "late"))
    place("MUG", 3, "holder")

    with pytest.raises(Exception) as error:
        place("MUG", 4, "buyer")

    assert error.value.code == "insufficient_stock"
    assert error.value.payload["shortages"] == [{"sku": "MUG", "requested": 4, "available": 2}]
    assert Order.objects.filter(status="expired").count() == 1  # the expiry was kept
    assert not Order.objects.filter(idempotency_key="buyer").exists()
    assert_books_balance(mug)


def _pay_sweep_or_place(action, order_ids=(), keys=()):
    """How many orders a sweep expired, or what each payer (by order id) or new buyer (by key) was told:
    a status, an order number or an error code."""
    wait_for_peers()
    if action == "sweep":
        return order_release_expired(batch_size=5).done
    told = {}
    for key in keys:
        try:
            items = [{"sku": "MUG", "quantity": 2}]
            told[key] = order_place(email="new@example.com", items=items, idempotency_key=key).number
        except DomainError as exc:
            told[key] = exc.code
    for order_id in order_ids:
        try:
            told[order_id] = pay(Order.objects.get(pk=order_id)).status
        except DomainError as exc:
            told[order_id] = exc.code
    return told


@pytest.mark.django_db(transaction=True)
def test_payments_racing_sweeps_and_new_orders_never_both_pay_and_release_an_order(make_variant, settings):
    """Overdue orders hold every mug while new orders want more: a payment that loses its order to a sweep
    pays only if its units are still there, and each sweeper, payer and buyer is told what the books say."""
    settings.SWEEP_LOCK_WAIT_SECONDS = settings.LOCK_WAIT_SECONDS  # no order is skipped, so each one ends
    received = 24
    mug, tee = make_variant(sku="MUG", stock=received), make_variant(sku="TEE", stock=12)
    # Two SKUs each, so a new order for mugs cannot expire them itself: only the sweeps do.
    placed = [
        order_place(
            email=f"o{i}@example.com",
            items=[{"sku": "MUG", "quantity": 1 + i % 3}, {"sku": "TEE", "quantity": 1}],
            idempotency_key=f"o{i}",
        )
        for i in range(12)
    ]  # 24 mugs
    make_overdue(*placed)
    ids = [o.pk for o in placed]
    jobs = (
        [{"action": "sweep"}] * 2
        + [{"action": "pay", "order_ids": ids[i::3]} for i in range(3)]
        + [{"action": "place", "keys": [f"new-{i}-{n}" for n in range(4)]} for i in range(2)]  # 16 mugs more
    )

    results = run_parallel(_pay_sweep_or_place, jobs, processes=len(jobs), barrier=True)

    swept, payers, buyers = results[:2], results[2] | results[3] | results[4], results[5] | results[6]
    for order in Order.objects.filter(pk__in=ids):
        reservations = list(Reservation.objects.filter(order_line__order=order))
        for reservation in reservations:  # never both committed and released
            kinds = sorted(reservation.movements.values_list("kind", flat=True))
            assert kinds == {"committed": ["commit", "reserve"], "released": ["release", "reserve"]}[reservation.state]
        states = Counter(r.state for r in reservations)
        charges = Counter(order.payments.values_list("state", flat=True))
        if order.status == "paid":  # on time, or reserved again after a sweep expired it
            assert payers[order.pk] == "paid"
            assert (states["committed"], charges) == (2, {"captured": 1})
        else:  # expired, and its mugs went to a new order before its payer could take them back: its payment
            # was refused at the start, or its success came too late and was refunded
            assert order.status == "expired" and payers[order.pk] in ("order_expired", "expired")
            assert (states["committed"], states["released"]) == (0, 2)
            assert set(charges) <= {"refunded"}  # charged while the sweep expired it: refunded
    expired = Order.objects.filter(lines__reservations__release_reason="expired").distinct().count()
    assert sum(swept) == expired  # the sweeps expired them all, each once
    for key, answer in buyers.items():
        new = Order.objects.filter(idempotency_key=key).first()
        assert answer == ("insufficient_stock" if new is None else new.number)
    assert "insufficient_stock" in buyers.values() or "order_expired" in payers.values()  # more wanted than received
    sold = sum(line.quantity for line in OrderLine.objects.filter(order__status="paid", variant=mug))
    held = sum(r.quantity for r in Reservation.objects.filter(state="active"))
    assert sold + held <= received
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (received - sold, held)
    assert (stock_of(tee).on_hand, stock_of(tee).reserved) == (12 - Order.objects.filter(status="paid").count(), 0)
    assert_books_balance(mug, tee)


def _pay_or_fail(action, order_id, after=""):
    """Pay the order, or mark its payment failed once its payment has reached ``after`` ("": at once,
    "charged": the payment is recorded and its success on its way, "paid": applied)."""
    wait_for_peers()
    if action == "pay":
        try:
            return pay(Order.objects.get(pk=order_id)).status
        except DomainError as exc:
            return exc.code
    reached = {
        "": lambda: True,
        "charged": Payment.objects.filter(order_id=order_id).exists,
        "paid": Order.objects.filter(pk=order_id, status="paid").exists,
    }[after]
    wait_for(reached, timeout=30, what=f"the payment to reach {after}")
    return order_fail_payment(order=Order.objects.get(pk=order_id))


@pytest.mark.django_db(transaction=True)
def test_failing_a_payment_races_safely_with_paying(make_variant, celery_eager):
    """A failure is marked without a stock lock (its release runs after), so only its conditional status
    change keeps it from undoing a payment: it lands before the payment, while it is applied, and after."""
    mug = make_variant(sku="MUG", stock=6)
    placed = [place("MUG", 2, f"o{i}") for i in range(3)]  # every unit held
    jobs = [
        job
        for order, after in zip(placed, ("", "charged", "paid"), strict=True)
        for job in ({"action": "pay", "order_id": order.pk}, {"action": "fail", "order_id": order.pk, "after": after})
    ]

    answers = run_parallel(_pay_or_fail, jobs, processes=len(jobs), barrier=True)

    for order, told in zip(placed, zip(answers[::2], answers[1::2], strict=True), strict=True):
        order.refresh_from_db()
        reservations = list(Reservation.objects.filter(order_line__order=order).order_by("pk"))
        charges = Counter(order.payments.values_list("state", flat=True))
        if order.status == "paid":
            # Paid, or failed first and then tried again: its units released, reserved anew and sold.
            assert told[0] == "paid" and charges == {"captured": 1}
            assert [r.state for r in reservations] in (["committed"], ["released", "committed"])
        else:
            # The failure came before its success (refunded).
            assert order.status == "payment_failed" and told == ("payment_failed", True)
            [reservation] = reservations
            assert (reservation.state, reservation.release_reason) == ("released", "payment_failed")
            assert set(charges) <= {"refunded"}  # charged before the failure won: refunded
        assert all(reservation.movements.count() == 2 for reservation in reservations)
    assert Order.objects.get(pk=placed[2].pk).status == "paid"  # a failure after the payment changes nothing
    sold = 2 * Order.objects.filter(status="paid").count()
    assert (stock_of(mug).on_hand, stock_of(mug).reserved) == (6 - sold, 0)
    assert_books_balance(mug)
