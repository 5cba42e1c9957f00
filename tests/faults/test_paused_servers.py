"""A server under the shop stalls mid-sale and comes back: a web worker, and separately the database
server, is paused (SIGSTOP) past the lock wait plus a socket timeout, and past the lock TTL, then
resumed (SIGCONT). A stalled disk or a failover looks like this to the lock holder: its batch taken,
its SQL stuck, its lease gone by the time it wakes, and it writes anyway (the database guard decides).

Black box, with the shop's default lock settings: gunicorn (several workers) on the test database and
Redis, one hot SKU, and buyers (threads here) coming in waves, each order of 1-3 units under its own
Idempotency-Key, retried with that key while its outcome is unknown (``lock_timeout`` with ``outcome:
unknown``, ``database_unavailable``, another 5xx, a dropped connection, the buyer's own timeout). Half the
buyers take a "nothing changed" answer (``lock_timeout`` without ``outcome: unknown``, ``lock_unavailable``,
"no stock was changed") at its word and give the key up; a quarter retry it; a quarter are impatient
(an 8 s timeout) and retry while their first try is still stuck inside the shop. What is proven:

- every key ends with its order (201) or a definite refusal (or, given up, with no order at all), and
  no buyer is told anything false: a 201's number is the order stored under that key, a refused key has
  no order, and "nothing changed" is true: a key given up on it never gets an order, even once the
  stalled servers have finished, and a retried one gets none before its retry was sent. (After an
  unknown outcome on the same key, "nothing changed" proves nothing either way: an earlier try may have
  placed the order.);
- the order numbers told to buyers are exactly the orders in the database, their units equal the stock
  reserved and the active reservations, the stock sells out and nothing is oversold, and the books
  balance.

The worker stopped is the one holding the hot SKU's lock, caught mid-transaction (the test holds the
stock row until a holder's guarded UPDATE waits on it, stops that worker, then lets the row go: the
UPDATE runs and the stopped transaction holds the row) with other buyers' requests taken, for 22 s: more than
``LOCK_WAIT_SECONDS`` (5) plus the waiting connection's socket timeout
(``LOCK_WAIT_SOCKET_TIMEOUT_SECONDS``, 15), so even the buyers it took in stop waiting for it, and far
less than gunicorn's worker timeout (60 s in ``tests.processes.app_server``), so it is resumed, not
killed. The database server is stopped as a holder takes other buyers' requests, for 12 s: more than
``LOCK_WAIT_SECONDS`` plus the ``locks`` cache's ``SOCKET_TIMEOUT`` (5) and than ``LOCK_TTL_SECONDS``
(10), and no more, because every test run on this machine stalls with it. Each stopped process is
resumed from a thread in ``finally``, and a watchdog process resumes it 2 s after its time even if
this process dies.
"""

import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.client import HTTPException
from pathlib import Path

import pytest
from django.conf import settings
from django.core.cache import caches
from django.db import connection
from django.db.models import Sum

from inventory.locks.wire import lock_key
from inventory.models import Reservation
from orders.models import Order, OrderLine
from tests.conftest import stock_of
from tests.faults.conftest import assert_books, row_locked, waiting_order_update
from tests.processes import app_server, http, process_env, wait_for

pytestmark = pytest.mark.django_db(transaction=True)

SKU = "HOT"
STOCK = 240
WORKERS = 6
CLIENTS = 20
WAVE = 1.0  # buyers come in waves, every second on the second, as a flash sale's do: a lock queue forms
# A worker stays stopped past a lock wait plus the waiting connection's socket timeout, so even a buyer
# its holder took in runs out of waiting; the database server, which stalls every test run on this
# machine, past a lock wait plus the locks cache's socket timeout, and a TTL (never above ~15 s).
WORKER_PAUSE_SECONDS = 22
DATABASE_PAUSE_SECONDS = 12
# Buyers' HTTP timeouts: patient ones hear every answer the shop gives, however late; impatient ones give
# up on a request stuck behind the pause and retry its key while the first try is still inside the shop.
PATIENT_TIMEOUT, IMPATIENT_TIMEOUT = 40, 8
SALE_AFTER_RESUME = 30  # at most this long after the resume buyers start new orders (they stop at sell-out)
SETTLE_SECONDS = 90  # from the start of the load, every key must have its final answer within this

PLACED, REFUSED, NOTHING_CHANGED, UNKNOWN = "placed", "refused", "nothing changed", "unknown"


@dataclass
class Answer:
    """One request and what the shop said (``status`` None: no HTTP answer at all)."""

    key: str
    client: int
    sent: float  # wall clock, as Order.created_at
    received: float
    status: int | None
    code: str = ""
    detail: str = ""
    outcome: str = ""
    number: str = ""
    retry_after: float = 0.5

    @property
    def kind(self) -> str:
        if self.status == 201:
            return PLACED
        if self.status in (400, 409, 422):
            return REFUSED
        if (self.code == "lock_timeout" and self.outcome != "unknown") or self.code == "lock_unavailable":
            return NOTHING_CHANGED
        return UNKNOWN


@dataclass
class Key:
    """One order a buyer means to place, under one Idempotency-Key, and every answer it got."""

    client: int
    quantity: int
    trusting: bool  # takes a first "nothing changed" at its word and gives the key up
    timeout: float  # its HTTP timeout
    answers: list[Answer] = field(default_factory=list)
    final: str = "unresolved"  # placed, refused, given up, unresolved


class Sale:
    """The buyers: CLIENTS threads placing orders on the hot SKU until ``stop`` is set."""

    def __init__(self, url: str, token: str):
        self.url, self.token = url, token
        self.keys: dict[str, Key] = {}
        self.answers: list[Answer] = []
        self.stop = threading.Event()
        self.started, self.started_at = time.monotonic(), time.time()
        self.threads = [threading.Thread(target=self._client, args=(n,), daemon=True) for n in range(CLIENTS)]

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for thread in self.threads:
            thread.join(SETTLE_SECONDS + PATIENT_TIMEOUT)
        assert not any(thread.is_alive() for thread in self.threads), "a buyer never finished"

    def sold_out(self) -> bool:
        return any(answer.code == "insufficient_stock" for answer in self.answers)

    def _client(self, index: int) -> None:
        rng = random.Random(index)
        count = 0
        while not self.stop.is_set():
            key = f"c{index}-{count}"
            count += 1
            self.keys[key] = Key(
                client=index,
                quantity=rng.randint(1, 3),
                trusting=index % 4 < 2,  # half the buyers, patient ones: they hear the late answers
                timeout=IMPATIENT_TIMEOUT if index % 4 == 3 else PATIENT_TIMEOUT,
            )
            self._settle(key)
            time.sleep(WAVE - (time.monotonic() - self.started) % WAVE)

    def _settle(self, key: str) -> None:
        """Place the key's order, retrying with the same key until the answer is final."""
        state, uncertain = self.keys[key], False
        while time.monotonic() < self.started + SETTLE_SECONDS:
            answer = self._post(key, state)
            state.answers.append(answer)
            self.answers.append(answer)
            if answer.kind in (PLACED, REFUSED):
                state.final = answer.kind
                return
            if answer.kind == NOTHING_CHANGED and state.trusting and not uncertain:
                state.final = "given up"
                return
            uncertain = uncertain or answer.kind == UNKNOWN
            time.sleep(answer.retry_after)

    def _post(self, key: str, state: Key) -> Answer:
        body = {"items": [{"sku": SKU, "quantity": state.quantity}]}
        sent = time.time()
        try:
            status, data, headers = http(
                "POST", f"{self.url}/api/orders/", token=self.token, body=body, key=key, timeout=state.timeout
            )
        except (OSError, HTTPException, ValueError) as exc:  # refused, reset, timed out, not JSON
            return Answer(key, state.client, sent, time.time(), None, detail=repr(exc))
        return Answer(
            key,
            state.client,
            sent,
            time.time(),
            status,
            code=data.get("code", ""),
            detail=data.get("detail", ""),
            outcome=data.get("outcome", ""),
            number=data.get("number", "") if status == 201 else "",
            retry_after=float(headers.get("Retry-After", 0.5)),
        )


_WATCHDOG = """
import os, select, signal, sys
pid, limit = int(sys.argv[1]), float(sys.argv[2])
for line in iter(sys.stdin.readline, ""):
    if line == "stopped\\n" and not select.select([sys.stdin], [], [], limit)[0]:
        os.kill(pid, signal.SIGCONT)  # stopped too long
try:
    os.kill(pid, signal.SIGCONT)  # the test is over, or died
except ProcessLookupError:
    pass  # gone already (a worker stopped with its server)
"""


class Pausable:
    """SIGSTOP and SIGCONT one process. A watchdog process (its own session, so Ctrl-C spares it)
    resumes it if it stays stopped over ``limit`` seconds, or at once when this process ends or dies."""

    def __init__(self, pid: int, limit: float):
        self.pid = pid
        self.stopped_at = self.resumed_at = 0.0
        self.watchdog = subprocess.Popen(
            [sys.executable, "-c", _WATCHDOG, str(pid), str(limit)],
            stdin=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )

    def stop(self) -> None:
        os.kill(self.pid, signal.SIGSTOP)
        self.stopped_at = time.time()
        self._tell("stopped")
        wait_for(lambda: _process_state(self.pid) == "T", timeout=5, what=f"{self.pid} to stop")

    def resume(self) -> None:
        try:
            os.kill(self.pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        if self.stopped_at > self.resumed_at:
            self.resumed_at = time.time()
        self._tell("resumed")

    def close(self) -> None:
        self.resume()
        self.watchdog.stdin.close()  # the watchdog resumes it once more and exits
        self.watchdog.wait(10)

    def _tell(self, line: str) -> None:
        self.watchdog.stdin.write(line + "\n")
        self.watchdog.stdin.flush()


def _resume_later(pausable: Pausable, seconds: float) -> threading.Thread:
    """A thread that resumes the stopped process after ``seconds``, whatever happens meanwhile."""

    def run():
        try:
            time.sleep(seconds)
        finally:
            pausable.resume()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def _process_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _socket_owner(pids, *, local_port: int, remote_port: int) -> int | None:
    """Which of ``pids`` owns the TCP connection from ``local_port`` to ``remote_port`` (from /proc)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            local, remote = (int(address.rsplit(":", 1)[1], 16) for address in fields[1:3])
            if (local, remote) == (local_port, remote_port):
                inodes.add(f"socket:[{fields[9]}]")
    for pid in pids:
        try:
            if any(os.readlink(fd) in inodes for fd in Path(f"/proc/{pid}/fd").iterdir()):
                return pid
        except OSError:
            continue
    return None


def _listener(port: int) -> int:
    """The process listening on this TCP port (the database server)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":  # LISTEN
                inodes.add(f"socket:[{fields[9]}]")
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                    return int(proc.name)
            except OSError:
                continue
    raise AssertionError(f"nothing listens on port {port}")


def _workers(master_pid: int) -> list[int]:
    return [int(pid) for pid in Path(f"/proc/{master_pid}/task/{master_pid}/children").read_text().split()]


def _lock_redis():
    client = caches[settings.LOCK_CACHE_ALIAS].client
    return client.get_client(write=True), str(client.make_key(lock_key(SKU)))


def _rows_written(pid: int) -> int:
    """Rows the process's open InnoDB transaction has written (and holds locked) so far; 0 if none is open."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p.host, t.trx_rows_modified FROM information_schema.innodb_trx t "
            "JOIN information_schema.processlist p ON p.id = t.trx_mysql_thread_id"
        )
        rows = [(int(host.rsplit(":", 1)[1]), written) for host, written in cursor.fetchall() if ":" in host]
    db_port = int(settings.DATABASES["default"]["PORT"] or 3306)
    return sum(written for port, written in rows if _socket_owner([pid], local_port=port, remote_port=db_port))


def _holder_batch() -> tuple[bytes | None, int, int]:
    """The hot SKU's lock holder's token (None: free, or only a hand-off claim), how many queued requests
    it took with the lock (their served marks were set with its lease, so they expire with it) and how
    many buyers wait in the queue behind it."""
    redis, key = _lock_redis()
    marks = list(redis.scan_iter(match=f"{key}:served:*", count=1000))
    pipe = redis.pipeline(transaction=True)
    pipe.get(key)
    pipe.pttl(key)
    pipe.llen(f"{key}:queue")
    for mark in marks:
        pipe.pttl(mark)
    token, lease_ms, queued, *marks_ms = pipe.execute()
    if not token or lease_ms <= settings.LOCK_HANDOFF_CLAIM_SECONDS * 1000:
        return None, 0, queued
    return token, sum(abs(mark_ms - lease_ms) <= 1 for mark_ms in marks_ms), queued


def _stop_the_holder(variant, pausables: dict[int, Pausable], *, within: float):
    """Stop the worker holding the hot SKU's lock mid-transaction, with other buyers' requests taken.

    The test holds the stock row's lock, as a slow transaction would, until a holder's guarded UPDATE
    waits on it; if that holder took other buyers' requests, its worker is stopped and the row let go,
    so the UPDATE runs inside the stopped worker's transaction, which then keeps the row. A holder that
    took no one is let through and the next one trapped. Returns the stopped process, its batch (taken,
    queued behind) and the rows its transaction had written (its row locks).
    """
    db_port = int(settings.DATABASES["default"]["PORT"] or 3306)
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        with row_locked(stock_of(variant)) as session:
            _, port = waiting_order_update(session)
            pid = _socket_owner(pausables, local_port=port, remote_port=db_port)
            _, taken, queued = _holder_batch()
            if pid in pausables and taken:
                pausables[pid].stop()
        if pid in pausables and taken:
            wait_for(lambda pid=pid: _rows_written(pid), timeout=10, what="the stopped holder's UPDATE to run")
            return pausables[pid], (taken, queued), _rows_written(pid)
    raise AssertionError(f"never caught a holder of {SKU}'s lock serving others mid-transaction")


def _wait_for_a_batch(*, within: float) -> tuple[int, int]:
    """Wait until a holder of the hot SKU's lock has taken other buyers' requests; its batch (taken, queued)."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        _, taken, queued = _holder_batch()
        if taken:
            return taken, queued
        time.sleep(0.001)
    raise AssertionError(f"never saw a holder of {SKU}'s lock serving others")


def _sell_on_after(sale: Sale, resumed_at: float) -> None:
    """Buyers go on after the resume, until the SKU has sold out (or SALE_AFTER_RESUME); then no new orders."""
    deadline = time.monotonic() + SALE_AFTER_RESUME
    time.sleep(3)
    while not sale.sold_out() and time.monotonic() < deadline:
        time.sleep(0.1)
    sale.stop.set()


def _assert_everyone_told_the_truth(sale: Sale, variant, pause: Pausable, log: Path) -> dict:
    """Every key's answers against the database (after the server has stopped: no late commit can come)."""
    orders = {order.idempotency_key: order for order in Order.all_objects.all()}
    quantities = {
        row["order__idempotency_key"]: row["units"]
        for row in OrderLine.objects.values("order__idempotency_key").annotate(units=Sum("quantity"))
    }
    problems = []
    for key, state in sale.keys.items():
        told = [(a.status, a.code, a.outcome, a.number) for a in state.answers]
        order = orders.get(key)
        if state.final == "unresolved":
            problems.append(f"{key}: no final answer within {SETTLE_SECONDS}s: {told}")
        elif state.final == PLACED:
            number = state.answers[-1].number
            if order is None or order.number != number or quantities.get(key) != state.quantity:
                problems.append(f"{key}: told {number}, stored {order and order.number}: {told}")
        elif order is not None:  # refused, or given up after "nothing changed"
            problems.append(f"{key}: ended {state.final} but order {order.number} exists: {told}")
        for index, answer in enumerate(state.answers):
            if answer.kind == UNKNOWN:
                break  # from here on an earlier attempt may have placed the order
            if answer.kind == NOTHING_CHANGED and order is not None:
                later = state.answers[index + 1 :]
                if not later or order.created_at.timestamp() < later[0].sent:
                    problems.append(
                        f"{key}: told 'nothing changed' ({answer.code}: {answer.detail}) at {answer.received:.3f}, "
                        f"yet order {order.number} was created at {order.created_at.timestamp():.3f} "
                        f"before any retry: {told}"
                    )
    log.write_text("\n".join(json.dumps(a.__dict__) for a in sorted(sale.answers, key=lambda a: a.sent)))
    assert not problems, "\n".join(problems[:20])

    told_numbers = {state.answers[-1].number for state in sale.keys.values() if state.final == PLACED}
    stored_numbers = {order.number for order in orders.values()}
    assert told_numbers == stored_numbers, (told_numbers - stored_numbers, stored_numbers - told_numbers)
    stock = stock_of(variant)
    units = OrderLine.objects.aggregate(units=Sum("quantity"))["units"] or 0
    active = Reservation.objects.filter(state=Reservation.State.ACTIVE).aggregate(units=Sum("quantity"))["units"]
    assert units == stock.reserved == (active or 0) <= stock.on_hand == STOCK
    refusals = {a.code for a in sale.answers if a.kind == REFUSED}
    assert refusals <= {"insufficient_stock"}, refusals  # same body per key: never a conflict or bad input
    assert_books(variant)

    # The pause hit the sale: requests in flight when it began were held up by it (no answer within the
    # client's timeout, or none before the resume), buyers retried keys whose outcome they did not know,
    # and the sale went on after the resume.
    held_up = [
        a
        for a in sale.answers
        if a.sent < pause.stopped_at < a.received and (a.status is None or a.received > pause.resumed_at)
    ]
    assert held_up, "no request was held up by the pause"
    assert any(answer.kind == UNKNOWN for answer in sale.answers), "no buyer was left not knowing"
    assert any(a.sent > pause.resumed_at for a in sale.answers), "no load after the resume"
    assert sale.sold_out()  # buyers wanted more than the stock: overselling was possible
    kinds = Counter(a.kind for a in sale.answers)
    return {
        "orders answered before the pause": sum(
            a.status == 201 and a.received < pause.stopped_at for a in sale.answers
        ),
        "requests": len(sale.answers),
        "keys": len(sale.keys),
        "retries": len(sale.answers) - len(sale.keys),
        "orders": len(orders),
        "units": units,
        "answers": dict(kinds),
        "unknown outcomes": dict(
            Counter(a.code or a.detail.split("(")[0] or str(a.status) for a in sale.answers if a.kind == UNKNOWN)
        ),
        "nothing changed": dict(Counter(a.code for a in sale.answers if a.kind == NOTHING_CHANGED)),
        "keys given up": sum(state.final == "given up" for state in sale.keys.values()),
        "keys refused": sum(state.final == REFUSED for state in sale.keys.values()),
        "requests held up by the pause": len(held_up),
        "longest request": round(max(a.received - a.sent for a in sale.answers), 1),
    }


def _server_log_lines(log: Path) -> dict:
    text = log.read_text()
    return {
        pattern: len(re.findall(pattern, text))
        for pattern in ("lock overrun", "never answered", "gave up on", "Traceback", "database connection lost")
    }


@pytest.fixture
def hot(make_variant):
    return make_variant(sku=SKU, stock=STOCK)


@pytest.fixture
def shop_env():
    """The lock settings the shop ships with: the pause outlasts a lock wait plus a socket timeout, and a TTL."""
    socket_timeout = settings.CACHES[settings.LOCK_CACHE_ALIAS]["OPTIONS"]["SOCKET_TIMEOUT"]
    wait_socket_timeout = settings.LOCK_WAIT_SOCKET_TIMEOUT_SECONDS
    assert (settings.LOCK_TTL_SECONDS, settings.LOCK_WAIT_SECONDS, socket_timeout, wait_socket_timeout) == (
        10,
        5,
        5,
        15,
    )
    assert WORKER_PAUSE_SECONDS > settings.LOCK_WAIT_SECONDS + max(socket_timeout, wait_socket_timeout)
    assert DATABASE_PAUSE_SECONDS > max(settings.LOCK_WAIT_SECONDS + socket_timeout, settings.LOCK_TTL_SECONDS)
    # Only the order throttle is raised: one token stands for all the buyers.
    return process_env(ORDER_THROTTLE_RATE="1000000/minute")


def test_a_web_worker_paused_holding_the_hot_skus_lock_tells_no_buyer_anything_false(hot, token, shop_env, tmp_path):
    pausables: dict[int, Pausable] = {}
    try:
        with app_server(shop_env, tmp_path / "gunicorn.log", workers=WORKERS) as (url, master):
            pausables = {pid: Pausable(pid, WORKER_PAUSE_SECONDS + 2) for pid in _workers(master.pid)}
            with Sale(url, token) as sale:
                pause, batch, written = _stop_the_holder(hot, pausables, within=30)
                resumer = _resume_later(pause, WORKER_PAUSE_SECONDS)
                available_at_pause = stock_of(hot).available
                resumer.join()
                available_at_resume = stock_of(hot).available
                _sell_on_after(sale, pause.resumed_at)
    finally:
        for pausable in pausables.values():
            pausable.close()

    figures = _assert_everyone_told_the_truth(sale, hot, pause, tmp_path / "answers.jsonl")
    figures |= {
        "paused after": round(pause.stopped_at - sale.started_at, 1),
        "paused holder's batch (taken, queued behind)": batch,
        "rows its transaction had written": written,
        "available at pause": available_at_pause,
        "available at resume": available_at_resume,
        "server log": _server_log_lines(tmp_path / "gunicorn.log"),
    }
    print(f"\npaused worker {pause.pid} for {pause.resumed_at - pause.stopped_at:.1f}s:", figures)


def test_the_database_server_paused_mid_sale_tells_no_buyer_anything_false(hot, token, shop_env, tmp_path):
    db = settings.DATABASES["default"]
    assert db["HOST"] in ("127.0.0.1", "localhost")  # the local server: we can signal it
    pause = Pausable(_listener(int(db["PORT"] or 3306)), DATABASE_PAUSE_SECONDS + 2)
    try:
        with app_server(shop_env, tmp_path / "gunicorn.log", workers=WORKERS) as (url, _):
            with Sale(url, token) as sale:
                batch = _wait_for_a_batch(within=20)
                pause.stop()  # from here until the resume this process must not touch the database
                _resume_later(pause, DATABASE_PAUSE_SECONDS).join()
                available_at_resume = stock_of(hot).available
                _sell_on_after(sale, pause.resumed_at)
    finally:
        pause.close()

    figures = _assert_everyone_told_the_truth(sale, hot, pause, tmp_path / "answers.jsonl")
    figures |= {
        "paused after": round(pause.stopped_at - sale.started_at, 1),
        "holder's batch (taken, queued behind)": batch,
        "available at resume": available_at_resume,
        "server log": _server_log_lines(tmp_path / "gunicorn.log"),
    }
    print(f"\npaused the database server for {pause.resumed_at - pause.stopped_at:.1f}s:", figures)
