"""The push process (``uvicorn config.push:app``): a change every waiting buyer must learn (sold out,
closed) reaches an open stream from the pass that saw it, and a stream for another drop hears nothing of
it; a place's own stream hears its admission; the API's join and place read answered there as the WSGI
app answers them."""

import http.client
import json
import subprocess
import time

import pytest

from drops import line as drops_line
from drops.errors import PassInvalid
from orders.models import Order
from orders.services import drop_line_pass, order_hold_checkout
from tests.conftest import client_for, pay, token_for
from tests.processes import BIN, ROOT, dies_with_us, free_port, process_env, stop, wait_for

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def push_server(tmp_path):
    port = free_port()
    with open(tmp_path / "push.log", "w") as log:
        proc = subprocess.Popen(
            [str(BIN / "uvicorn"), "config.push:app", "--port", str(port), "--no-access-log"]
            + ["--timeout-graceful-shutdown", "1"],
            cwd=ROOT, env=process_env(), stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=dies_with_us(),
        )  # fmt: skip
    try:
        wait_for(lambda: _answers(port), timeout=20, what="the push process")
        yield port
    finally:
        stop(proc)


def _answers(port: int) -> bool:
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        connection.request("GET", "/")
        return connection.getresponse().status == 404
    except OSError:
        return False


def stream(port: int, drop_id: int):
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    connection.request("GET", f"/events/drops/{drop_id}/")
    response = connection.getresponse()
    assert response.status == 200 and response.getheader("Content-Type") == "text/event-stream"
    assert response.readline() == b"retry: 5000\n" and response.readline() == b"\n"
    return response


def next_news(response) -> str:
    while not (line := response.readline()).startswith(b"data: "):
        assert line, "the stream ended"
    return line.decode()


def test_sold_out_and_closed_reach_an_open_stream_at_once(make_drop, push_server):
    drop, other = make_drop(units=1), make_drop(units=1)
    variant = drop.entries.get().variant
    drop_line_pass(drop=drop)
    from drops.waiting import line_enter

    line_enter(drop_id=drop.pk, sku=variant.sku, quantity=1, customer_id=None, email="a@example.com", ticket=None)
    listening, elsewhere = stream(push_server, drop.pk), stream(push_server, other.pk)
    time.sleep(0.3)  # both streams registered
    drop_line_pass(drop=drop)  # admits the one buyer: the unit is held
    drop_line_pass(drop=drop)  # publishes sold out
    assert '"state":"sold_out"' in next_news(listening)
    pay(order_hold_checkout(order=Order.objects.get()))
    drop_line_pass(drop=drop)
    assert '"state":"closed"' in next_news(listening)
    elsewhere.fp.raw._sock.settimeout(0.5)
    with pytest.raises(TimeoutError):
        next_news(elsewhere)  # no news of the other drop


def edge(port: int, method: str, path: str, body: bytes = b"", **headers):
    """A request to the push process: (status, JSON body, headers)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    connection.request(method, path, body=body, headers=headers)
    response = connection.getresponse()
    return response.status, json.loads(response.read()), {k.lower(): v for k, v in response.getheaders()}


def next_event(response) -> tuple[str, dict]:
    """The stream's next event: its name (``message`` for news) and its data."""
    name = "message"
    while True:
        line = response.readline()
        assert line, "the stream ended"
        if line.startswith(b"event: "):
            name = line[7:].strip().decode()
        elif line.startswith(b"data: "):
            return name, json.loads(line[6:])


def test_a_crowd_joins_and_learns_its_admission_from_the_push_process(make_drop, customer, push_server):
    """The join the push process answers is the API's (same place, same pass), and the place's stream
    says "admitted" the moment the runner settles the hold: no poll in between."""
    drop = make_drop(units=1)
    variant = drop.entries.get().variant
    drop_line_pass(drop=drop)
    auth = {"Authorization": f"Token {token_for(customer)}", "Content-Type": "application/json"}
    path = f"/api/drops/{drop.pk}/line/"
    status, joined, headers = edge(push_server, "POST", path, json.dumps({"sku": variant.sku}).encode(), **auth)
    assert status == 201 and joined["state"] == "waiting" and headers["retry-after"], joined
    again = client_for(customer).post(path, {"sku": variant.sku}, format="json")  # the WSGI app's view
    assert again.status_code == 200 and again.json()["ticket"] == joined["ticket"]
    connection = http.client.HTTPConnection("127.0.0.1", push_server, timeout=5)
    connection.request("GET", f"/events/drops/{drop.pk}/", headers={"X-Drop-Pass": joined["pass_token"]})
    listening = connection.getresponse()
    told = {key: value for key, value in joined.items() if key != "pass_token"}
    assert next_event(listening) == ("place", told)
    drop_line_pass(drop=drop)  # admits the one buyer
    name, place = next_event(listening)
    while name != "place":  # the news may come first
        name, place = next_event(listening)
    assert place["state"] == "admitted" and place["order"] == Order.objects.get().number
    status, read, _ = edge(push_server, "GET", path, **{"X-Drop-Pass": joined["pass_token"]})
    assert status == 200 and read["state"] == "admitted"


@pytest.mark.parametrize(
    ("body", "headers", "status", "code"),
    [
        (b'{"sku": ', {}, 400, "malformed_json"),
        (b'{"sku": "NOPE"}', {}, 400, "invalid_input"),
        (b'{"sku": "SKU", "quantity": 0}', {}, 400, "invalid_input"),
        (b'["x"]', {}, 400, "invalid_input"),
        (b"x" * 5000, {}, 400, "malformed_json"),
        (b'{"sku": "SKU"}', {"Authorization": "Token nope"}, 401, "authentication_failed"),
        (b'{"sku": "SKU"}', {"Authorization": ""}, 401, "not_authenticated"),
    ],
)
def test_the_push_process_refuses_bad_joins_as_the_api_does(
    make_drop, customer, push_server, body, headers, status, code
):  # noqa: E501
    drop = make_drop(units=1)
    drop_line_pass(drop=drop)
    sent = {"Authorization": f"Token {token_for(customer)}"} | headers
    body = body.replace(b'"SKU"', f'"{drop.entries.get().variant.sku}"'.encode())
    got, answer, _ = edge(push_server, "POST", f"/api/drops/{drop.pk}/line/", body, **sent)
    assert (got, answer["code"]) == (status, code), answer
    assert edge(push_server, "GET", f"/api/drops/{drop.pk}/line/", **{"X-Drop-Pass": "forged"})[:2] == (
        403,
        {"code": "pass_invalid", "detail": PassInvalid.default_detail, "fields": {}},
    )
    assert drops_line.line_admitted(drop_id=drop.pk) == [] and not Order.objects.exists()


def test_the_stream_lets_only_the_shops_own_pages_read_it(make_drop, push_server):
    drop = make_drop(units=1)
    for origin, allowed in (("http://127.0.0.1:8000", True), ("https://evil.example", False)):
        connection = http.client.HTTPConnection("127.0.0.1", push_server, timeout=5)
        connection.request("GET", f"/events/drops/{drop.pk}/", headers={"Origin": origin})
        answer = connection.getresponse()
        assert (answer.getheader("Access-Control-Allow-Origin") == origin) is allowed
        connection.close()
