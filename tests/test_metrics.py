"""/metrics: Prometheus text for monitoring only. After a burst of orders over three gunicorn workers and a
reconcile run in its own process (prometheus-client's multi-process mode), every figure moved as the
orders did."""

import subprocess
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

import pytest
from django.db import transaction
from django.db.models import F
from django.utils import timezone
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from inventory.batching import Demand, StockPlan
from inventory.errors import LockTimeout
from inventory.models import Reservation, Stock
from orders.models import Order
from tests.conftest import stock_of, token_for
from tests.processes import BIN, ROOT, app_server, http, process_env

TOKEN = "scrape-token-for-tests"


def scrape(url: str, token: str = TOKEN) -> dict:
    """Every sample of /metrics by name and labels, e.g. ``("shop_orders_refused_total", (("code", "x"),))``."""
    status, text = _get(f"{url}/metrics", token)
    assert status == 200, text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def _get(url: str, token: str) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def total(samples: dict, name: str, **labels) -> float:
    """The sum of ``name``'s samples whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(
        value for (sample, sample_labels), value in samples.items() if sample == name and wanted <= set(sample_labels)
    )


@pytest.mark.django_db(transaction=True)
def test_after_a_burst_of_orders_the_metrics_count_what_happened(make_variant, customer, tmp_path):
    token = token_for(customer)
    mug, tee = make_variant(sku="MUG", stock=20), make_variant(sku="TEE", stock=50)
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    env = process_env(ORDER_THROTTLE_RATE="100000/minute", PROMETHEUS_MULTIPROC_DIR=metrics_dir, METRICS_TOKEN=TOKEN)
    with app_server(env, tmp_path / "gunicorn.log", workers=3) as (url, _):
        assert _get(f"{url}/metrics", "")[0] == 403
        assert _get(f"{url}/metrics", "wrong-token")[0] == 403

        def order(n: int, sku: str = "MUG"):
            body = {"items": [{"sku": sku, "quantity": 1}]}
            return http("POST", f"{url}/api/orders/", token=token, body=body, key=f"burst-{sku}-{n}")[:2]

        with ThreadPoolExecutor(16) as pool:
            answers = list(pool.map(order, range(30)))  # 20 units for 30 buyers at once
        unknown = [order(n, sku="NO-SUCH-SKU") for n in range(3)]
        placed = [body for status, body in answers if status == 201]
        late = Order.objects.filter(number=placed[0]["number"])
        late.update(expires_at=timezone.now() - timedelta(minutes=5))  # overdue, not yet swept
        Stock.objects.filter(variant=tee).update(on_hand=F("on_hand") + 1)  # a counter off its ledger
        reconcile = subprocess.run(
            [str(BIN / "python"), "manage.py", "reconcile"], cwd=ROOT, env=env, capture_output=True, timeout=120
        )
        samples = scrape(url)

    refused = [body["code"] for status, body in answers if status != 201]
    assert len(placed) == 20 and refused == ["insufficient_stock"] * 10
    assert [(status, body["code"]) for status, body in unknown] == [(400, "unknown_sku")] * 3
    assert reconcile.returncode == 1, reconcile.stdout  # it found the drift

    assert total(samples, "shop_orders_placed_total") == 20
    assert total(samples, "shop_orders_refused_total", code="insufficient_stock") == 10
    assert total(samples, "shop_orders_refused_total", code="unknown_sku") == 3
    # Every placed order waited for the lock or its holder; every placed or refused one ran in a batch.
    assert total(samples, "shop_lock_wait_seconds_count") >= 20
    assert 20 <= total(samples, "shop_batch_size_sum", kind="place") <= 30
    assert total(samples, "shop_batch_size_count", kind="place") <= total(samples, "shop_batch_size_sum", kind="place")
    assert total(samples, "shop_reservations_active") == Reservation.objects.filter(state="active").count() == 20
    assert stock_of(mug).reserved == 20
    assert total(samples, "shop_sweep_lag_seconds") >= 5 * 60
    assert total(samples, "shop_reconcile_drift_found_total") == 1  # counted by the reconcile process
    assert total(samples, "shop_lock_service_fallbacks_total") == 0
    requests = "django_http_requests_total_by_view_transport_method_total"
    assert total(samples, requests, view="api:order-list", method="POST") == 33
    assert total(samples, "django_http_requests_latency_seconds_by_view_method_count", view="api:order-list") == 33
    assert total(samples, "django_http_responses_total_by_status_total", status="409") == 10


@pytest.mark.django_db
def test_a_guarded_update_that_refuses_units_read_as_free_is_busy_and_counted(make_variant):
    """A rival changed the row since the holder read it (a lost lock): nothing is written, and the buyer is
    told to retry (``lock_timeout``), not that the units are gone."""
    mug = make_variant(sku="MUG", stock=5)
    plan = StockPlan({mug.pk: 5})  # read under the lock: 5 free
    plan.take([Demand(variant_id=mug.pk, sku="MUG", quantity=5)])
    Stock.objects.filter(variant=mug).update(on_hand=2)  # a rival sold 3 since: the lock was lost
    before = REGISTRY.get_sample_value("shop_guard_refusals_total")

    with transaction.atomic(), pytest.raises(LockTimeout):
        plan.reserve()

    assert stock_of(mug).reserved == 0
    assert REGISTRY.get_sample_value("shop_guard_refusals_total") == before + 1


@pytest.mark.django_db
def test_metrics_are_for_staff_a_token_or_an_allowed_network_only(client, settings, staff_user):
    settings.METRICS_TOKEN, settings.METRICS_ALLOWED_NETWORKS = TOKEN, ["10.1.0.0/16"]

    refused = client.get("/metrics")
    assert (refused.status_code, refused.json()["code"]) == (403, "permission_denied")
    assert client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}x").status_code == 403
    assert client.get("/metrics", REMOTE_ADDR="10.2.0.1").status_code == 403
    assert client.get("/metrics", HTTP_X_FORWARDED_FOR="10.1.0.9").status_code == 403  # forwarded: not believed

    by_token = client.get("/metrics", HTTP_AUTHORIZATION=f"Bearer {TOKEN}")
    assert by_token.status_code == 200 and b"shop_orders_placed_total" in by_token.content
    assert by_token["Content-Type"].startswith("text/plain")
    assert client.get("/metrics", REMOTE_ADDR="10.1.4.2").status_code == 200
    client.force_login(staff_user)
    assert client.get("/metrics").status_code == 200


def manage_check(**env) -> subprocess.CompletedProcess:
    env = process_env(DJANGO_SETTINGS_MODULE="config.settings", **env)
    return subprocess.run([BIN / "python", "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True)


@pytest.mark.parametrize("entry", ["10.0.0.1/8", "10.0.0.0/33", "not-a-network"])
def test_a_malformed_allowed_network_refuses_to_start(entry):
    """Read once at start, not on every scrape: a typo stops the process with the entry named."""
    run = manage_check(METRICS_ALLOWED_NETWORKS=f"127.0.0.0/8,{entry}")
    assert run.returncode != 0 and f"METRICS_ALLOWED_NETWORKS: {entry!r}" in run.stderr, run.stderr[-2000:]


def test_well_formed_allowed_networks_start():
    run = manage_check(METRICS_ALLOWED_NETWORKS="10.0.0.0/8, 192.168.1.7,::1")
    assert run.returncode == 0, run.stderr[-2000:]
