"""The checkout page's database connection is killed for real while its order is being placed.

The buyer's checkout, on gunicorn, queues for the SKU's lock behind another buyer's order, which takes
the buyer's request into its own transaction (group commit). The test kills the checkout's connection
(``KILL CONNECTION``) while it waits, and keeps the holder's transaction waiting on a row lock until the
checkout has given up on its answer: the checkout cannot tell whether its order exists, and the order is
committed after the buyer has been answered. Resending the form, as a browser does, must land on it.
"""

import re
import threading
import urllib.error
import urllib.request
from http.cookiejar import CookieJar
from pathlib import Path
from urllib.parse import urlencode

import pytest
from django.db import connection

from core.db import LOST_CONNECTION
from inventory.locks import lock_list, sku_locks
from orders.models import Order
from orders.services import order_place
from tests.conftest import stock_of
from tests.faults.conftest import assert_books, mysql_session, row_locked, waiting_order_update
from tests.processes import app_server, process_env, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None  # the caller sees the redirect itself


class Browser:
    """A browser without JavaScript: keeps its cookies, posts forms with the CSRF token, reports redirects."""

    def __init__(self, url: str):
        self.url = url
        self.cookies = CookieJar()
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.cookies), _NoRedirect)

    def open(self, path: str, form: dict | None = None) -> tuple[int, str, str]:
        """GET ``path``, or POST ``form`` to it: (status, Location, page)."""
        data = None
        if form is not None:
            csrf = next(cookie.value for cookie in self.cookies if cookie.name == "csrftoken")
            data = urlencode({**form, "csrfmiddlewaretoken": csrf}).encode()
        try:
            with self.opener.open(self.url + path, data=data, timeout=60) as response:
                return response.status, "", response.read().decode()
        except urllib.error.HTTPError as answer:
            return answer.code, answer.headers.get("Location", ""), answer.read().decode()


def queued_on(sku: str) -> int:
    """Requests waiting for the SKU's lock."""
    return next((lock["waiters"] for lock in lock_list() if lock["sku"] == sku), 0)


def database_connection_of(pid: int) -> int:
    """The MySQL connection id of the process's one database connection, matched by its client port."""
    sockets = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        target = fd.readlink().name
        if target.startswith("socket:["):
            sockets.add(target[8:-1])
    ports = {
        int(fields[1].rsplit(":", 1)[1], 16)
        for table in ("/proc/net/tcp", "/proc/net/tcp6")
        for fields in map(str.split, Path(table).read_text().splitlines()[1:])
        if fields[9] in sockets
    }
    session = mysql_session()
    try:
        cursor = session.cursor()
        cursor.execute("SELECT id, host FROM information_schema.processlist WHERE db = DATABASE()")
        [connection_id] = [id_ for id_, host in cursor.fetchall() if int(host.rsplit(":", 1)[1]) in ports]
        return connection_id
    finally:
        session.close()


def in_background(func):
    """Run ``func`` in a thread (with its own database connection); its result lands in the returned list."""
    results = []

    def run():
        try:
            results.append(func())
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, results


def test_resending_the_checkout_form_after_its_connection_was_killed_lands_on_its_one_order(make_variant, tmp_path):
    mug = make_variant(sku="MUG", name="Logo mug", stock=10)
    log = tmp_path / "gunicorn.log"
    # The checkout gives up on the holder's answer within LOCK_WAIT_SECONDS + LOCK_TTL_SECONDS.
    with app_server(process_env(LOCK_WAIT_SECONDS=3, LOCK_TTL_SECONDS=4), log, workers=1) as (url, master):
        [worker] = Path(f"/proc/{master.pid}/task/{master.pid}/children").read_text().split()
        buyer = Browser(url)
        buyer.open("/products/MUG/")
        assert buyer.open("/cart/add/MUG/", {"quantity": 2})[0] == 302
        page = buyer.open("/checkout/")[2]
        form = {
            "email": "ann@example.com",
            "idempotency_key": re.search(r'name="idempotency_key" value="(\w+)"', page)[1],
        }

        with row_locked(stock_of(mug)) as session:
            with sku_locks(["MUG"]):
                bob = {"email": "bob@example.com", "items": [{"sku": "MUG", "quantity": 1}], "idempotency_key": "bob"}
                holder, _ = in_background(lambda: order_place(**bob))
                wait_for(lambda: queued_on("MUG") == 1, timeout=10, what="the holder-to-be to queue")
                checkout, answers = in_background(lambda: buyer.open("/checkout/", form))
                wait_for(lambda: queued_on("MUG") == 2, timeout=10, what="the checkout to queue behind it")
                session.cursor().execute(f"KILL CONNECTION {database_connection_of(int(worker))}")
            waiting_order_update(session)  # the holder, serving the checkout's request too, waits on the row
            checkout.join(60)
            assert not Order.objects.exists()  # the holder has committed nothing yet
        holder.join(60)
        [placed] = Order.objects.filter(email="ann@example.com")  # committed after the checkout was answered
        resent = buyer.open("/checkout/", form)  # the same form again, as a browser resends it
        shown = buyer.open(resent[1])

    assert f"database connection lost during checkout: ({LOST_CONNECTION}" in log.read_text()
    status, location, first_page = answers[0]
    assert (status, location) == (200, "")  # the page, not an error: the buyer can submit it again
    assert "could not confirm your order" in first_page
    assert re.search(r'name="idempotency_key" value="(\w+)"', first_page)[1] == form["idempotency_key"]
    assert sorted(Order.objects.values_list("email", flat=True)) == ["ann@example.com", "bob@example.com"]
    assert resent[:2] == (302, f"/orders/{placed.number}/")
    assert shown[0] == 200 and f"Order {placed.number}" in shown[2] and "Awaiting payment" in shown[2]
    assert stock_of(mug).reserved == 3
    assert_books(mug)
