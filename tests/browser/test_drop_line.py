"""A drop's line in real browsers, at a phone's width and a desktop's: the issue's acceptance test.

One unit, two buyers. A joins first and B second; a pass of the runner admits A, who checks out with the
unit held and pays. B's waiting page learns, without the test reloading it, that the drop is sold out
(A holds the unit, which may come back) and then closed (A paid). The test plays the runner by calling
``drop_line_pass`` itself, so it decides when each buyer is let in; while A checks out and pays it keeps
passing in a thread, as ``manage.py drop_line`` would: news no pass confirmed for ``NEWS_STALE_MS`` pauses
the line. Screenshots of the waiting page go to artifacts/screenshots/drop-*-<width>.png.
"""

import re
import threading
from contextlib import contextmanager

import pytest
from django.db import connection
from playwright.sync_api import expect

from orders.models import Order
from orders.services import drop_line_pass
from tests.browser.conftest import screenshot
from tests.conftest import assert_books_balance, stock_of

WIDTHS = {390: {"width": 390, "height": 844}, 1280: {"width": 1280, "height": 800}}
# B's waiting page reloads itself on the shared news (drops/static/drops/line.js reads it every 2 s).
NEWS_SHOWN_MS = 6_000


@pytest.fixture
def open_tab(browser, live_server, transactional_db):
    """A new browser (its own context: its own cookies, so its own pass) at a viewport; like the ``page``
    fixture, any page that breaks the Content-Security-Policy fails the test."""
    contexts, refused = [], []

    def open_tab(viewport: dict):
        context = browser.new_context(base_url=live_server.url, viewport=viewport)
        contexts.append(context)
        tab = context.new_page()
        tab.set_default_timeout(15_000)
        tab.on("console", lambda message: "Content Security Policy" in message.text and refused.append(message.text))
        return tab

    yield open_tab
    for context in contexts:
        context.close()
    assert not refused, refused


@contextmanager
def runner_passing(drop, every: float = 1.0):
    """Pass over ``drop`` every ``every`` seconds in a thread, as the runner does, until the block ends."""
    stop, failed = threading.Event(), []

    def run():
        try:
            while not stop.wait(every):
                drop_line_pass(drop=drop)
        except Exception as exc:  # re-raised in the test's thread
            failed.append(exc)
        finally:
            connection.close()  # this thread's own

    thread = threading.Thread(target=run, name="drop-line-runner", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(10)
    if failed:
        raise failed[0]


def join(tab, drop, email: str):
    tab.goto(f"/drops/{drop.pk}/")
    tab.get_by_label("Email").fill(email)
    tab.get_by_test_id("join-line").click()


@pytest.mark.parametrize("width", WIDTHS, ids=lambda width: f"{width}px")
def test_join_wait_get_admitted_check_out_and_pay_while_the_next_buyer_is_told_sold_out(
    open_tab, make_drop, payments_worker, width
):
    drop = make_drop(units=1, name="Night runner", price="129.00")  # not shipped: no address to give
    variant = drop.entries.get().variant
    drop_line_pass(drop=drop)  # the runner's first pass publishes the news that opens the line

    ann, bob = open_tab(WIDTHS[width]), open_tab(WIDTHS[width])
    join(ann, drop, "ann@example.com")
    expect(ann.get_by_test_id("place")).to_contain_text("You are #1 in line for Night runner (0 ahead of you)")
    screenshot(ann, f"drop-waiting-{width}")
    join(bob, drop, "bob@example.com")
    expect(bob.get_by_test_id("place")).to_contain_text("You are #2 in line for Night runner (1 ahead of you)")

    assert drop_line_pass(drop=drop).admitted == 1  # Ann's turn: the unit is held for her
    held = Order.objects.get()
    assert (held.status, held.email) == (Order.Status.HELD, "ann@example.com")
    expect(ann.get_by_test_id("admitted")).to_contain_text("You're in: 1 × Night runner is held for you until")
    screenshot(ann, f"drop-admitted-{width}")
    expect(bob.get_by_test_id("place")).to_contain_text("You are #1 in line")  # his place moved up

    assert drop_line_pass(drop=drop).state == "sold_out"  # the one unit is held
    expect(bob.get_by_test_id("sold-out")).to_be_visible(timeout=NEWS_SHOWN_MS)
    expect(bob.get_by_test_id("sold-out")).to_contain_text("you are #1 for Night runner")
    screenshot(bob, f"drop-sold-out-{width}")

    with runner_passing(drop):
        ann.get_by_test_id("hold-checkout").click()
        expect(ann).to_have_url(re.compile(rf"/orders/{held.number}/checkout/$"))
        expect(ann.get_by_test_id("held")).to_be_visible()
        ann.get_by_test_id("place-order").click()
        expect(ann.get_by_test_id("status")).to_have_text("Awaiting payment")
        ann.get_by_test_id("pay").click()  # to the local provider's page
        expect(ann.get_by_test_id("amount")).to_have_text("€129.00")
        expect(bob.get_by_test_id("sold-out")).to_be_visible()  # still: the runner keeps his line on
        ann.get_by_test_id("local-pay").click()
        # The webhook comes from the worker; the order page refreshes itself until then.
        expect(ann.get_by_test_id("status")).to_have_text("Paid", timeout=30_000)

    # Sold and nothing held: nothing can come back. Bob's page learns it from the news it reads every 2 s
    # (its own Refresh header, on the sold-out page, comes only every 15 s).
    assert drop_line_pass(drop=drop).state == "closed"
    expect(bob.get_by_test_id("closed")).to_be_visible(timeout=NEWS_SHOWN_MS)

    stock = stock_of(variant)
    assert (stock.on_hand, stock.reserved) == (0, 0)
    assert list(Order.objects.values_list("number", "status")) == [(held.number, Order.Status.PAID)]
    assert_books_balance(variant)
