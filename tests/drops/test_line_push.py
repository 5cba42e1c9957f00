"""The lines' news pushed as server-sent events by the ASGI process (``uvicorn config.push:app``): a change
every waiting buyer must learn (sold out, closed) reaches an open stream from the pass that saw it, and a
stream for another drop hears nothing of it."""

import http.client
import subprocess
import time

import pytest

from orders.services import drop_line_pass, order_hold_checkout
from tests.conftest import pay
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
    from orders.models import Order

    pay(order_hold_checkout(order=Order.objects.get()))
    drop_line_pass(drop=drop)
    assert '"state":"closed"' in next_news(listening)
    elsewhere.fp.raw._sock.settimeout(0.5)
    with pytest.raises(TimeoutError):
        next_news(elsewhere)  # no news of the other drop
