"""The embedded mode as a newcomer meets it: ``bin/run`` with nothing configured (SQLite, the embedded Redis),
walked through HTTP the way its users go: browsing, cart, checkout with an address, paid shipping, tax and
a voucher, a drop's line (joined, admitted, the held unit checked out and paid), paying after a decline,
an account, staff shipping, refunding and taking a return, and every command the README names, run
beside it. No answer may be a 500, and no log may hold a traceback.

One shop serves the whole module (starting it costs seconds); its tests run in order, each a stage of the
walk, handing what it made to the next through ``walk``.
"""

import json
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from html.parser import HTMLParser
from http.cookiejar import CookieJar

import pytest

from tests.bin_run import embedded_shop_started, manage
from tests.conftest import ADDRESS_DE
from tests.processes import ROOT, wait_for

PASSWORD = "walk-Pa55word-embedded"


# Beat's reconcile_stock moves the ledger's checkpoints every RECONCILE_SECONDS over movements older than
# the margin (its least): the walk lasts long enough for both, and for reconcile --full to sum them.
MARGIN_SECONDS, RECONCILE_SECONDS = 60, 15


@pytest.fixture(scope="module")
def shop(tmp_path_factory):
    var = tmp_path_factory.mktemp("walk") / "var"
    settings = {"LEDGER_CHECKPOINT_MARGIN_SECONDS": MARGIN_SECONDS, "RECONCILE_SECONDS": RECONCILE_SECONDS}
    with embedded_shop_started(var, **{name: str(value) for name, value in settings.items()}) as shop:
        shop.started = time.monotonic()
        yield shop


@pytest.fixture(scope="module")
def walk() -> dict:
    """What one stage of the walk hands to the next (tokens, order numbers)."""
    return {}


class Forms(HTMLParser):
    """The forms of a page: each one's action and the values a browser would send unchanged."""

    def __init__(self, page: str):
        super().__init__()
        self.forms: list[dict] = []
        self._select = None
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "form":
            self.forms.append({"action": attrs.get("action") or "", "fields": {}})
        elif not self.forms:
            return
        fields = self.forms[-1]["fields"]
        name = attrs.get("name")
        if tag == "input" and name and attrs.get("type") not in ("submit", "button"):
            if attrs.get("type") not in ("checkbox", "radio"):
                fields[name] = attrs.get("value") or ""
            elif "checked" in attrs:
                fields[name] = attrs.get("value", "on")
        elif tag == "select" and name:
            self._select = name
        elif tag == "option" and self._select and ("selected" in attrs or self._select not in fields):
            fields[self._select] = attrs.get("value") or ""

    def handle_endtag(self, tag):
        if tag == "select":
            self._select = None


class Browser:
    """A person's browser: cookies, forms with their CSRF token, and no answer a 500."""

    def __init__(self, url: str):
        self.url = url
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(CookieJar()))
        self.page, self.at = "", url

    def open(self, path: str, data: dict | None = None) -> int:
        url = urllib.parse.urljoin(self.at, path)
        body = None if data is None else urllib.parse.urlencode(data).encode()
        request = urllib.request.Request(url, data=body, headers={"Referer": self.at})
        try:
            with self.opener.open(request, timeout=60) as response:
                status, self.at = response.status, response.url
                self.page = response.read().decode(errors="replace")
        except urllib.error.HTTPError as error:
            status, self.page = error.code, error.read().decode(errors="replace")
        assert status < 500, f"{status} from {url}: {self.page[:2000]}"
        return status

    def form(self, contains: str) -> dict:
        """The first form on the page whose fields or action mention ``contains``."""
        for form in Forms(self.page).forms:
            if contains in form["action"] or contains in form["fields"]:
                return form
        raise AssertionError(f"no form with {contains!r} on {self.at}: {self.page[:2000]}")

    def submit(self, contains: str, **values) -> int:
        form = self.form(contains)
        return self.open(form["action"] or self.at, form["fields"] | values)


def api(shop, method: str, path: str, *, token: str = "", body=None, key: str = "") -> tuple[int, dict]:
    """One API call; any 500, or an answer that is not JSON, fails the walk."""
    headers = {"Content-Type": "application/json", "Accept": "application/json"}
    headers |= {"Authorization": f"Token {token}"} if token else {}
    headers |= {"Idempotency-Key": key} if key else {}
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(shop.url + path, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            status, raw, kind = response.status, response.read(), response.headers["Content-Type"]
    except urllib.error.HTTPError as error:
        status, raw, kind = error.code, error.read(), error.headers["Content-Type"]
    assert kind == "application/json" or (status in (202, 204) and not raw), f"{status} {kind} {method} {path}: {raw}"
    assert status < 500, f"{status} from {method} {path}: {raw[:2000]}"
    return status, json.loads(raw or b"{}")


def emailed(shop, pattern: str) -> str:
    """The first match of ``pattern`` in the emails bin/run prints (the worker's log, or its own output)."""
    found = []

    def printed() -> bool:
        text = (shop.var / "worker.log").read_text() + shop.output
        found[:] = re.findall(pattern, text)
        return bool(found)

    wait_for(printed, timeout=90, what=f"an email matching {pattern} in var/worker.log")
    return found[-1]


def paid_through_the_local_provider(shop, number: str, token: str, outcome: str) -> dict:
    """Start paying, and press the local provider's Pay or Decline; the order as the worker leaves it."""
    status, payment = api(shop, "POST", f"/api/orders/{number}/pay/", token=token)
    assert status in (200, 201) and payment["redirect_url"].startswith("/payments/local/"), payment
    page = Browser(shop.url)
    page.open(payment["redirect_url"])
    forms = [form for form in Forms(page.page).forms if form["fields"].get("outcome") == outcome]
    assert forms, page.page[:2000]
    page.open(payment["redirect_url"], forms[0]["fields"])
    final = "paid" if outcome == "pay" else "payment_failed"
    wait_for(
        lambda: api(shop, "GET", f"/api/orders/{number}/", token=token)[1]["status"] == final,
        timeout=60,
        what=f"the worker to apply the local provider's {outcome}",
    )
    return api(shop, "GET", f"/api/orders/{number}/", token=token)[1]


def test_the_shop_starts_embedded_and_prints_the_staff_password_once(shop, walk):
    assert "Mode: embedded (SQLite file" in shop.output
    [password] = re.findall(r"Staff user: staff / password: (\S+)", shop.output)
    status, body = api(shop, "POST", "/api/auth/token/", body={"username": "staff", "password": password})
    assert status == 200, body
    walk["staff"] = body["token"]


def test_a_visitor_browses_the_catalog_a_category_and_a_variant_and_fills_a_cart(shop):
    browser = Browser(shop.url)
    assert browser.open("/") == 200
    categories = sorted(set(re.findall(r'href="(/categories/[\w-]+/)"', browser.page)))
    products = sorted(set(re.findall(r'href="(/products/[\w-]+/)"', browser.page)))
    assert categories and products, browser.page[:2000]
    assert browser.open(categories[0]) == 200 and browser.open(f"{categories[0]}?sort=price&page=2") < 500
    assert browser.open("/?search=mug&in_stock=true") == 200
    assert browser.open("/products/SNEAKER-42/") in (200, 404)  # a size of the sneaker, if the demo has it
    variants = sorted(set(re.findall(r'href="(/products/SNEAKER[\w-]*/)"', browser.page)))
    for path in variants[:2]:
        assert browser.open(path) == 200
    assert browser.open("/products/MUG-LOGO/") == 200
    browser.submit("/cart/add/", quantity="2")
    assert browser.open("/cart/") == 200 and "MUG-LOGO" in browser.page or "mug" in browser.page.lower()
    for path in ("/api/products/?ordering=-price", "/api/products/MUG-LOGO/", "/api/schema/", "/favicon.ico"):
        browser.open(path)


def test_a_guest_checks_out_on_the_pages_with_an_address_paid_shipping_tax_and_drop10(shop):
    """The README's DROP10, on the checkout page: it answered 500 (FOR UPDATE on SQLite)."""
    browser = Browser(shop.url)
    browser.open("/products/MUG-LOGO/")
    browser.submit("/cart/add/", quantity="1")
    browser.open("/checkout/")
    address = {f"shipping-{name}": value for name, value in ADDRESS_DE.items()}
    browser.submit("idempotency_key", email="guest@example.com", voucher="DROP10", action="update", **address)
    assert "DROP10" in browser.page and "shipping_method" in browser.form("idempotency_key")["fields"]
    form = browser.form("idempotency_key")
    assert browser.open(form["action"] or browser.at, form["fields"] | {"action": "place"}) == 200
    assert "/orders/" in browser.at, re.findall(r'class="error"[^>]*>([^<]*)', browser.page) or browser.page
    assert "DROP10" in browser.page


def test_a_guest_joins_the_demo_drops_line_is_admitted_checks_out_the_held_unit_and_pays(shop):
    """The seeded drop: the product page leads to the line, bin/run's runner admits, the unit is held."""
    browser = Browser(shop.url)
    browser.open("/products/DROP-SNEAKER-41/")
    line_page = re.search(r'href="(/drops/\d+/)"', browser.page)
    assert line_page, browser.page[:3000]
    browser.open(line_page[1])
    assert browser.submit("email", sku="DROP-SNEAKER-41", email="dropper@example.com") == 200
    assert "in line" in browser.page or "You're in" in browser.page, browser.page[:3000]
    wait_for(lambda: browser.open(line_page[1]) == 200 and "You're in" in browser.page, timeout=30,
             what="the line's runner to admit the guest")  # fmt: skip
    browser.open(re.search(r'href="(/orders/\w+/checkout/)"', browser.page)[1])
    assert "held for you" in browser.page
    address = {f"shipping-{name}": value for name, value in ADDRESS_DE.items()}
    browser.submit("idempotency_key", action="update", **address)
    form = browser.form("idempotency_key")
    assert browser.open(form["action"] or browser.at, form["fields"] | {"action": "place"}) == 200
    assert "/orders/" in browser.at and "/checkout/" not in browser.at, browser.page[:3000]
    order_page = browser.at
    browser.submit("/pay/")
    browser.submit("outcome", outcome="pay")
    wait_for(lambda: browser.open(order_page) == 200 and "Paid" in browser.page, timeout=60,
             what="the drop's order paid")  # fmt: skip


def test_a_buyer_signs_up_verifies_from_the_email_and_logs_in(shop, walk):
    body = {"username": "walker", "email": "walker@example.com", "password": PASSWORD}
    status, answer = api(shop, "POST", "/api/accounts/signup/", body=body)
    assert status in (201, 202), answer
    token = emailed(shop, r"/accounts/verify/([\w:.-]+)/")
    status, answer = api(shop, "POST", "/api/accounts/verify/", body={"token": token, "password": PASSWORD})
    assert status == 200, answer
    status, answer = api(
        shop, "POST", "/api/auth/token/", body={"username": "walker@example.com", "password": PASSWORD}
    )
    assert status == 200, answer
    walk["buyer"] = answer["token"]
    browser = Browser(shop.url)
    browser.open("/accounts/login/")
    browser.submit("username", username="walker", password=PASSWORD)
    assert browser.open("/accounts/") == 200 and "walker" in browser.page


def test_the_buyer_keeps_addresses(shop, walk):
    token = walk["buyer"]
    body = {"address": ADDRESS_DE, "is_default_shipping": True}
    status, entry = api(shop, "POST", "/api/accounts/addresses/", token=token, body=body)
    assert status == 201, entry
    moved = {"address": ADDRESS_DE | {"city": "Köln"}}
    assert api(shop, "PATCH", f"/api/accounts/addresses/{entry['id']}/", token=token, body=moved)[0] == 200
    status, listed = api(shop, "GET", "/api/accounts/addresses/", token=token)
    assert status == 200 and "Köln" in json.dumps(listed, ensure_ascii=False)


def test_an_api_buyer_joins_the_drop_at_the_push_process_and_its_stream_says_admitted(shop, walk):
    """The crowd's way in: the line's API at bin/run's push process (EVENTS_PORT), the place's stream
    telling the admission, then the held order checked out and paid through the app."""
    token, push = walk["buyer"], f"http://127.0.0.1:{shop.env['EVENTS_PORT']}"
    product = Browser(shop.url)
    product.open("/products/DROP-SNEAKER-41/")
    drop_id = re.search(r'href="/drops/(\d+)/"', product.page)[1]
    sku = "DROP-SNEAKER-43"  # six pairs (demo.catalog); the guest's walk takes a 41
    join = urllib.request.Request(
        f"{push}/api/drops/{drop_id}/line/", data=json.dumps({"sku": sku}).encode(), method="POST",
        headers={"Authorization": f"Token {token}", "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(join, timeout=30) as answer:
        assert answer.status == 201
        joined = json.loads(answer.read())
    stream = urllib.request.urlopen(
        urllib.request.Request(f"{push}/events/drops/{drop_id}/", headers={"X-Drop-Pass": joined["pass_token"]}),
        timeout=30,
    )
    place, deadline = {}, time.monotonic() + 60  # the stream's heartbeats keep it open: a deadline of its own
    while place.get("state") != "admitted":
        assert time.monotonic() < deadline, f"not admitted within 60 s: {place}"
        line = stream.readline()
        assert line, "the stream ended before the admission"
        if line.startswith(b"data: ") and b'"ticket"' in line:
            place = json.loads(line[6:])
    stream.close()
    checkout = urllib.request.Request(
        f"{shop.url}/api/orders/{place['order']}/checkout/", method="POST",
        data=json.dumps({"shipping_address": ADDRESS_DE}).encode(),
        headers={"X-Drop-Pass": joined["pass_token"], "Content-Type": "application/json"},
    )  # fmt: skip
    with urllib.request.urlopen(checkout, timeout=60) as answer:
        assert json.loads(answer.read())["status"] == "awaiting_payment"
    assert paid_through_the_local_provider(shop, place["order"], token, "pay")["status"] == "paid"


def test_an_order_with_drop10_paid_shipping_and_tax_is_paid_after_a_decline(shop, walk):
    """A retry after a decline was refused order_expired whenever shipping cost money: SQLite's float
    shipping price never equalled the stored 9.90."""
    token = walk["buyer"]
    hoodie = api(shop, "GET", "/api/products/?search=hoodie")[1]["results"][0]["sku"]
    walk["hoodie"] = hoodie
    items = [{"sku": "MUG-LOGO", "quantity": 3}, {"sku": hoodie, "quantity": 1}]
    order = {"items": items, "shipping_address": ADDRESS_DE, "voucher": "DROP10"}
    status, quote = api(shop, "POST", "/api/checkout/quote/", token=token, body=order)
    assert status == 200, quote
    express = [m for m in quote["shipping_methods"] if m["name"] == "Express"]
    order["shipping_method"] = (express or quote["shipping_methods"])[0]["id"]
    status, placed = api(shop, "POST", "/api/orders/", token=token, body=order, key="walk-drop10")
    assert status == 201, placed
    assert placed["voucher_code"] == "DROP10" and placed["discount"] != "0.00" and placed["tax"] != "0.00"
    assert placed["shipping_price"] != "0.00", placed
    declined = paid_through_the_local_provider(shop, placed["number"], token, "decline")
    assert declined["status"] == "payment_failed"
    paid = paid_through_the_local_provider(shop, placed["number"], token, "pay")
    assert paid["total"] == placed["total"]
    walk["order"] = paid


def test_staff_ship_part_refund_a_line_and_accept_a_return(shop, walk):
    staff, buyer, number = walk["staff"], walk["buyer"], walk["order"]["number"]
    shipment = {"carrier": "DHL", "tracking_number": "0034", "lines": [{"sku": "MUG-LOGO", "quantity": 2}]}
    status, shipped = api(shop, "POST", f"/api/orders/{number}/ship/", token=staff, body=shipment)
    assert status in (200, 201) and shipped["status"] == "partially_shipped", shipped
    refund = {"restock": True, "lines": [{"sku": walk["hoodie"], "quantity": 1}]}
    status, refunded = api(shop, "POST", f"/api/orders/{number}/refund/", token=staff, body=refund)
    assert status in (200, 201), refunded
    ask = {"lines": [{"sku": "MUG-LOGO", "quantity": 1}], "reason": "chipped"}
    status, asked = api(shop, "POST", f"/api/orders/{number}/returns/", token=buyer, body=ask)
    assert status == 201, asked
    status, accepted = api(shop, "POST", f"/api/returns/{asked['id']}/accept/", token=staff, body={})
    assert status in (200, 201), accepted
    status, order = api(shop, "GET", f"/api/orders/{number}/", token=buyer)
    assert status == 200 and order["amount_refunded"] != "0.00", order
    status, rest = api(shop, "POST", f"/api/orders/{number}/ship/", token=staff, body={"carrier": "DHL"})
    assert status in (200, 201), rest
    for path in (f"/orders/{number}/", "/orders/", "/admin/"):
        Browser(shop.url).open(path)


# Every manage.py command the README names, with arguments that run it through beside bin/run; each
# must end as its docs say (0, or 1 for drift or a held lock, 2 for a refusal; None: either 0 or 2),
# never with a traceback.
README_COMMANDS = [
    (["check"], 0),
    (["makemigrations", "--check", "--dry-run"], 0),  # the recipes run it: every model change has its migration
    (["migrate", "--noinput"], 0),
    (["createsuperuser", "--noinput", "--username", "boss", "--email", "boss@example.com"], 0),
    (["reconcile"], 0),
    (["reconcile", "--full"], 0),
    (["drop_line", "--once"], 0),
    (["release_expired", "--dry-run"], 0),
    (["release_expired"], 0),
    (["reset_locks"], 0),
    (["adjust_stock", "MUG-LOGO", "--delta", "1", "--reason", "found one more"], 0),
    (["adjust_stock", "MUG-LOGO", "--set", "0", "--reason", "below what is reserved"], None),
    (["seed_demo"], 0),
    (["seed_history", "--orders", "10", "--skus", "2"], 1),  # MariaDB only: refuses SQLite, and says so
    (["oversell_demo", "--strategy", "all", "--workers", "2", "--stock", "3", "--attempts", "6"], 0),
    (["reconcile", "--full", "--fix"], 0),
    (["reconcile", "--full"], 0),
]


@pytest.mark.parametrize(("command", "exits"), README_COMMANDS, ids=[" ".join(c) for c, _ in README_COMMANDS])
def test_every_readme_command_runs_beside_bin_run(shop, command, exits):
    # The seeded movements settled and a checkpoint moved over them: reconcile's sums read that range.
    time.sleep(max(0.0, shop.started + MARGIN_SECONDS + 2 * RECONCILE_SECONDS - time.monotonic()))
    run = manage(shop.env, *command, timeout=300, LEDGER_CHECKPOINT_MARGIN_SECONDS=str(MARGIN_SECONDS))
    said = run.stdout + run.stderr
    assert "Traceback" not in said, said
    assert run.returncode == exits if exits is not None else run.returncode in (0, 2), said


def test_the_readme_names_no_command_the_walk_leaves_out():
    readme = (ROOT / "README.md").read_text()
    commands = {path.stem for path in ROOT.glob("*/management/commands/*.py")}
    named = set(re.findall(r"^\| `(\w+)[ `]", readme, flags=re.MULTILINE)) & commands
    for doc in [ROOT / "README.md", *ROOT.glob("docs/*.md")]:
        named |= set(re.findall(r"manage\.py (\w+)", doc.read_text()))
    assert named <= {command[0] for command, _ in README_COMMANDS}, named


def test_the_beat_tasks_ran_and_no_log_holds_a_traceback(shop):
    time.sleep(2)  # the last emails and sweeps
    worker = (shop.var / "worker.log").read_text()
    assert re.search(r"reconcile_stock\[[\w-]+\] succeeded", worker), worker[-5000:]  # beat's, every 15 s
    for name in ("worker.log", "beat.log", "drop_line.log"):
        text = (shop.var / name).read_text()
        assert "Traceback" not in text and "ERROR" not in text, f"{name}:\n{text[-5000:]}"
    assert "Traceback" not in shop.output, shop.output[-5000:]
