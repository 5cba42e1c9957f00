"""The line's faults. Redis down while a line is open: the line pauses (no one admitted, no place lost, the
pages and the API say so), admitted buyers check out and cancel through the database; Redis back, the line
resumes in order. A runner killed mid-admission: its claim is finished by the next pass with the same
hold, so no unit is held without its place told and no place is admitted twice."""

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from drops import line, passes
from drops.waiting import line_enter
from orders.models import Order
from orders.services import drop_line_pass
from orders.services.holding import hold_key
from tests.conftest import stock_of, token_for
from tests.processes import BIN, ROOT, RedisServer, app_server, dies_with_us, process_env, redis_command, stop, wait_for
from tests.race import run_process

pytestmark = pytest.mark.django_db(transaction=True)


def call(method: str, url: str, *, token: str = "", drop_pass: str = "", body=None):
    headers = {"Content-Type": "application/json"}
    headers |= {"Authorization": f"Token {token}"} if token else {}
    headers |= {passes.HEADER: drop_pass} if drop_pass else {}
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read() or b"{}"), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}"), dict(error.headers)


def test_redis_down_pauses_the_line_and_it_resumes_in_order(make_drop, django_user_model, tmp_path):
    drop = make_drop(units=1)
    sku = drop.entries.get().variant.sku
    tokens = [token_for(django_user_model.objects.create_user(f"buyer{n}", f"b{n}@example.com")) for n in range(3)]
    with RedisServer(tmp_path) as redis:
        env = process_env(REDIS_URL=redis.url, CELERY_BROKER_URL=redis.url, DROP_LINE_PASS_SECONDS="0.1")
        runner_log = open(tmp_path / "runner.log", "w")
        runner = subprocess.Popen(
            [str(BIN / "python"), "manage.py", "drop_line"], cwd=ROOT, env=env, stdout=runner_log,
            stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=dies_with_us(),
        )  # fmt: skip
        try:
            with app_server(env, tmp_path / "gunicorn.log", workers=2) as (url, _):
                base = f"{url}/api/drops/{drop.pk}"
                wait_for(lambda: call("GET", f"{base}/news/")[1]["state"] == "open", timeout=30, what="the news")
                joined = [call("POST", f"{base}/line/", token=t, body={"sku": sku})[1] for t in tokens]
                assert [j["ticket"] for j in joined] == [1, 2, 3]
                first, second, third = (j["pass_token"] for j in joined)

                def place(token):
                    return call("GET", f"{base}/line/", drop_pass=token)

                wait_for(lambda: place(first)[1]["state"] == "admitted", timeout=30, what="the first admitted")
                held = place(first)[1]["order"]
                wait_for(lambda: place(second)[1]["state"] == "sold_out", timeout=30, what="sold out told")

                redis_command(redis.port, "SHUTDOWN", "SAVE")  # down, its keys kept on disk as AOF/RDB keeps them
                redis.proc.wait(10)
                status, body, headers = place(second)
                assert (status, body["code"]) == (503, "line_paused") and int(headers["Retry-After"]) > 0
                status, body, _ = call("POST", f"{base}/line/", token=tokens[1], body={"sku": sku})
                assert (status, body["code"]) == (503, "line_paused")
                # The admitted buyer goes on through the database: checks out, then cancels (the lock's
                # database fallback), which frees the unit while no one can be admitted for it.
                assert call("POST", f"{url}/api/orders/{held}/checkout/", drop_pass=first, body={})[0] == 200
                assert call("POST", f"{url}/api/orders/{held}/cancel/", token=tokens[0])[0] == 200
                time.sleep(1.5)  # the runner passes, and admits no one
                assert Order.objects.count() == 1 and stock_of(drop.entries.get().variant).reserved == 0

                redis.start()  # the same address and data: the shop and the runner reconnect by themselves
                wait_for(lambda: place(second)[0] == 200 and place(second)[1]["state"] == "admitted", timeout=30,
                         what="the second admitted")  # fmt: skip
                wait_for(lambda: place(third)[1]["state"] == "sold_out", timeout=30, what="the third told sold out")
                assert place(third)[1]["ahead"] == 0
        finally:
            stop(runner)
            runner_log.close()
    second_hold = Order.objects.get(status=Order.Status.HELD)
    assert second_hold.idempotency_key == hold_key(drop_id=drop.pk, ticket=2)
    assert "the line is paused" in (tmp_path / "runner.log").read_text()


def _pass_killed_at(*, drop_id: int, step: str) -> None:
    """One runner pass that dies (SIGKILL) before placing its claim's hold, or after, before telling the line."""
    from drops.models import Drop
    from orders.services import holding

    def die(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGKILL)

    holding.PASS_LEASE_SECONDS = 1  # its turn lapses soon after it dies
    if step == "before_hold":
        holding.order_place = die
    else:
        holding.line.line_settle = die
    drop_line_pass(drop=Drop.objects.get(pk=drop_id))


@pytest.mark.parametrize("step", ["before_hold", "after_hold"])
def test_a_runner_killed_mid_admission_is_repaired_by_the_next_pass(make_drop, monkeypatch, step):
    drop = make_drop(units=1)
    variant = drop.entries.get().variant
    drop_line_pass(drop=drop)

    for n in range(2):
        line_enter(
            drop_id=drop.pk, sku=variant.sku, quantity=1, customer_id=None, email=f"b{n}@example.com", ticket=None
        )
    assert run_process(_pass_killed_at, drop_id=drop.pk, step=step) == -signal.SIGKILL
    assert Order.objects.count() == (1 if step == "after_hold" else 0)
    assert line.line_status(drop_id=drop.pk, ticket=1).state == line.State.CLAIMED
    time.sleep(1.2)  # the dead runner's turn lapses
    monkeypatch.setattr(line, "CLAIM_STALE_MS", 0)  # the claim is old enough to be taken over at once
    assert drop_line_pass(drop=drop).admitted == 1
    order = Order.objects.get()
    assert order.idempotency_key == hold_key(drop_id=drop.pk, ticket=1) and order.status == Order.Status.HELD
    assert line.line_status(drop_id=drop.pk, ticket=1).order == order.number
    assert line.line_status(drop_id=drop.pk, ticket=2).state == line.State.WAITING
    assert drop_line_pass(drop=drop).admitted == 0
    assert line.line_admitted(drop_id=drop.pk) == [1] and stock_of(variant).reserved == 1
