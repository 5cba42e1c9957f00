"""Deploy-ready security: production settings, login throttling, and errors that show no internals."""

import json
import logging
import os
import secrets
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from django.conf import settings
from django.db import OperationalError, connection
from django.test import Client, RequestFactory
from rest_framework.test import APIClient

from config import error_views
from core.db import SERVER_GONE
from core.throttling import LoginThrottle
from tests.conftest import client_for
from tests.faults.conftest import mysql_session
from tests.processes import wait_for

ROOT = Path(__file__).resolve().parents[1]


# --- Production settings ------------------------------------------------------------------------


def run_manage(*args: str, **env: str) -> subprocess.CompletedProcess:
    """manage.py under config.settings_production, with a production-like environment and nothing else."""
    environment = {
        "PATH": os.environ["PATH"],
        "DJANGO_SETTINGS_MODULE": "config.settings_production",
        "SECRET_KEY": secrets.token_urlsafe(64),
        "DATABASE_URL": "mysql://shop:not-a-real-password@db.internal:3306/shop",
        "REDIS_URL": "redis://redis.internal:6379/0",
        "ALLOWED_HOSTS": "shop.example.com",
        "PAYMENT_PROVIDER": "stripe",
        "STRIPE_SECRET_KEY": "sk_test_not_a_real_key",
        "STRIPE_WEBHOOK_SECRET": "whsec_not_a_real_secret",
        **env,
    }
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=120
    )


def test_check_deploy_reports_no_issues_with_the_production_settings():
    result = run_manage("check", "--deploy", "--fail-level", "WARNING")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip() == "System check identified no issues (0 silenced).", result.stdout + result.stderr


def test_check_deploy_passes_behind_a_tls_terminating_proxy():
    result = run_manage(
        "check", "--deploy", "--fail-level", "WARNING", SECURE_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO,https"
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_production_keeps_connections_takes_any_case_of_currency_and_has_no_local_payment_webhook():
    code = (
        "from django.conf import settings as s; db = s.DATABASES['default']; "
        "print(s.SHOP_CURRENCY, 'local' in s.PAYMENT_PROVIDERS, 'stripe' in s.PAYMENT_PROVIDERS, "
        "db['CONN_MAX_AGE'], db['CONN_HEALTH_CHECKS'])"
    )
    result = run_manage("shell", "-c", code, SHOP_CURRENCY="eur")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "EUR False True 60 True"


def test_the_production_settings_are_https_only():
    code = (
        "from django.conf import settings as s; "
        "print(s.SECURE_PROXY_SSL_HEADER, s.SECURE_SSL_REDIRECT, s.SECURE_HSTS_SECONDS, s.SESSION_COOKIE_SECURE, "
        "s.CSRF_COOKIE_SECURE, s.X_FRAME_OPTIONS, s.DEBUG, s.ALLOWED_HOSTS)"
    )
    result = run_manage("shell", "-c", code, SECURE_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO,https")
    assert result.returncode == 0, result.stderr
    expected = "('HTTP_X_FORWARDED_PROTO', 'https') True 31536000 True True DENY False ['shop.example.com']"
    assert result.stdout.strip().splitlines()[-1] == expected


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"DEBUG": "1"}, "DEBUG is on, which config.settings_production refuses"),
        ({"SECRET_KEY": ""}, "Set SECRET_KEY"),
        ({"ALLOWED_HOSTS": ""}, "Set ALLOWED_HOSTS"),
        ({"REDIS_URL": ""}, "config.settings_production needs DATABASE_URL and REDIS_URL"),
        ({"SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO"}, "SECURE_PROXY_SSL_HEADER is HEADER,value"),
        ({"PAYMENT_PROVIDER": "local"}, "PAYMENT_PROVIDER is local, which config.settings_production refuses"),
        ({"PAYMENT_PROVIDER": ""}, "PAYMENT_PROVIDER is local, which config.settings_production refuses"),
        ({"STRIPE_SECRET_KEY": ""}, "Set STRIPE_SECRET_KEY"),
        ({"STRIPE_WEBHOOK_SECRET": ""}, "Set STRIPE_WEBHOOK_SECRET"),
        ({"SHOP_CURRENCY": "EURO"}, "SHOP_CURRENCY must be an ISO 4217 code"),
    ],
    ids=[
        "debug",
        "no-secret-key",
        "no-allowed-hosts",
        "embedded-redis",
        "bad-proxy-header",
        "local-payment-provider",
        "provider-left-to-the-default",
        "no-stripe-key",
        "webhook-secret-left-to-the-default",
        "not-a-currency",
    ],
)
def test_the_production_settings_refuse_to_start_when_unsafe(env, message):
    result = run_manage("check", **env)
    assert result.returncode != 0
    assert "django.core.exceptions.ImproperlyConfigured: " + message in result.stderr, result.stderr


# --- Login throttling -------------------------------------------------------------------------------

RATE = 3


@pytest.fixture(autouse=True)
def login_rate(settings):
    settings.LOGIN_THROTTLE_RATE = f"{RATE}/minute"


def token_login(username: str, password: str, ip: str = "10.0.0.1", **headers):
    return APIClient().post(
        "/api/auth/token/", {"username": username, "password": password}, format="json", REMOTE_ADDR=ip, **headers
    )


def assert_throttled(response):
    assert response.status_code == 429
    assert response.json()["code"] == "throttled"
    assert set(response.json()) >= {"code", "detail", "fields"}
    assert 1 <= int(response["Retry-After"]) <= 60


def test_the_token_api_refuses_failed_logins_over_the_rate_even_the_right_password(customer):
    for _ in range(RATE):
        assert token_login("alice", "wrong").json()["code"] == "invalid_input"
    assert_throttled(token_login("alice", "wrong"))
    assert_throttled(token_login("alice", "pw-alice-123"))  # else a guesser would learn when it is right


def test_successful_logins_do_not_count(customer):
    for _ in range(RATE - 1):
        assert token_login("alice", "wrong").status_code == 400
    for _ in range(2 * RATE):
        assert token_login("alice", "pw-alice-123").status_code == 200
    assert token_login("alice", "wrong").status_code == 400
    assert_throttled(token_login("alice", "wrong"))


def test_one_username_is_throttled_whatever_the_address_and_others_are_not(customer, bob):
    for n in range(RATE):
        assert token_login("alice", "wrong", ip=f"10.0.1.{n}").status_code == 400
    assert_throttled(token_login("alice", "pw-alice-123", ip="10.0.1.99"))
    assert_throttled(token_login("ALICE", "wrong", ip="10.0.1.98"))  # MySQL matches usernames case-insensitively
    assert token_login("bob", "pw-bob-123", ip="10.0.1.97").status_code == 200


def test_one_address_is_throttled_whatever_the_username_and_others_are_not(customer, bob):
    for n in range(RATE):
        assert token_login(f"guess{n}", "wrong", ip="10.0.2.1").status_code == 400
    assert_throttled(token_login("bob", "pw-bob-123", ip="10.0.2.1"))
    assert token_login("bob", "pw-bob-123", ip="10.0.2.2").status_code == 200


def test_a_forged_x_forwarded_for_does_not_escape_the_address_limit(customer):
    for n in range(RATE):
        assert token_login(f"guess{n}", "wrong", HTTP_X_FORWARDED_FOR=f"192.0.2.{n}").status_code == 400
    assert_throttled(token_login("guess9", "wrong", HTTP_X_FORWARDED_FOR="192.0.2.9"))


def test_behind_a_proxy_the_address_it_reports_is_throttled(settings, customer):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    for n in range(RATE):
        assert token_login(f"guess{n}", "wrong", ip="10.9.9.9", HTTP_X_FORWARDED_FOR="192.0.2.1").status_code == 400
    assert_throttled(token_login("guess9", "wrong", ip="10.9.9.9", HTTP_X_FORWARDED_FOR="192.0.2.1"))
    assert token_login("guess9", "wrong", ip="10.9.9.9", HTTP_X_FORWARDED_FOR="192.0.2.2").status_code == 400


@pytest.mark.parametrize("username", ["", "alice"], ids=["address", "address-and-username"])
@pytest.mark.django_db(transaction=True)  # the threads look the username's account up, each on its own connection
def test_parallel_guesses_cannot_pass_one_check_together(username):
    request = RequestFactory().post("/api/auth/token/", REMOTE_ADDR="10.0.3.1")
    barrier = threading.Barrier(20)
    allowed = []

    def guess():
        barrier.wait()
        try:
            allowed.append(LoginThrottle(request, username=username).attempt())
        finally:
            connection.close()

    threads = [threading.Thread(target=guess) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(allowed) == 20  # every guess was judged
    if username:
        # Two counters: an attempt under the limit on one but over it on the other is refused (and gives
        # both back), so a burst may be admitted fewer than the rate, even none of it, but never more.
        assert allowed.count(True) <= RATE
    else:
        assert allowed.count(True) == RATE


def web_login(username: str, password: str, ip: str = "10.0.4.1", path: str = "/accounts/login/"):
    client = Client(REMOTE_ADDR=ip)
    return client, client.post(path, {"username": username, "password": password})


def test_the_login_page_shows_a_429_page_after_too_many_failures(customer, bob):
    for _ in range(RATE):
        _, response = web_login("alice", "wrong")
        assert response.status_code == 200 and "Wrong username, email or password." in response.content.decode()
    client, response = web_login("alice", "pw-alice-123")
    assert response.status_code == 429
    assert 1 <= int(response["Retry-After"]) <= 60
    assert "Too many login attempts" in response.content.decode()
    assert "_auth_user_id" not in client.session  # the right password did not log in while throttled
    _, response = web_login("bob", "pw-bob-123", ip="10.0.4.2")
    assert response.status_code == 302


def test_the_login_page_and_the_api_share_one_budget(customer):
    for _ in range(RATE - 1):
        assert web_login("alice", "wrong")[1].status_code == 200
    assert token_login("alice", "wrong", ip="10.0.5.1").status_code == 400
    assert web_login("alice", "wrong", ip="10.0.5.2")[1].status_code == 429


def test_the_admin_login_is_throttled_too(shop_staff):
    for _ in range(RATE):
        assert web_login("stan", "wrong", path="/admin/login/")[1].status_code == 200
    client, response = web_login("stan", "pw-stan-123", path="/admin/login/")
    assert response.status_code == 429
    assert "_auth_user_id" not in client.session
    assert web_login("stan", "pw-stan-123", ip="10.0.6.1", path="/admin/login/")[1].status_code == 429


SPELLINGS = ["stan ", "stan\u3000", "\uff53\uff54\uff41\uff4e", "STAN"]  # space, ideographic space, full-width


@pytest.mark.parametrize("spelling", SPELLINGS, ids=["trailing-space", "ideographic-space", "full-width", "upper"])
def test_another_spelling_of_a_username_shares_its_budget_on_every_login(shop_staff, spelling):
    """Each spelling logs in as ``stan`` (the forms strip and NFKC-normalise; MySQL's collation folds the
    rest), so each must count against stan's one budget, on the API, the login page and the admin alike."""
    assert token_login(spelling, "pw-stan-123", ip="10.0.7.1").status_code == 200  # it is stan's account
    assert token_login("stan", "wrong", ip="10.0.7.2").status_code == 400
    assert web_login(spelling, "wrong", ip="10.0.7.3")[1].status_code == 200
    assert web_login(spelling, "wrong", ip="10.0.7.4", path="/admin/login/")[1].status_code == 200
    assert_throttled(token_login(spelling, "wrong", ip="10.0.7.5"))
    assert web_login(spelling, "pw-stan-123", ip="10.0.7.6")[1].status_code == 429
    assert web_login("stan", "pw-stan-123", ip="10.0.7.7", path="/admin/login/")[1].status_code == 429


# --- Errors show no internals ---------------------------------------------------------------------


def failing_sql(*args, **kwargs):
    """A real database error whose message names a table and the database."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT card_number FROM secret_payments_table")


def assert_shows_nothing_inside(body: str):
    for leak in ("secret_payments_table", "card_number", "SELECT", settings.DATABASES["default"]["NAME"], "Traceback"):
        assert leak not in body


def test_an_unexpected_api_error_is_a_plain_500_in_the_error_shape(monkeypatch, customer, caplog):
    monkeypatch.setattr("orders.apis.order_list_for_customer", failing_sql)
    client = client_for(customer)
    client.raise_request_exception = False
    with caplog.at_level(logging.ERROR, logger="django.request"):
        response = client.get("/api/orders/")
    assert response.status_code == 500
    assert response["Content-Type"] == "application/json"
    assert response.json() == {
        "code": "server_error",
        "detail": "Something went wrong on our side; it has been logged.",
        "fields": {},
    }
    assert_shows_nothing_inside(response.content.decode())
    assert "secret_payments_table" in caplog.text  # the operators still see it, in the log


def test_an_unexpected_error_in_a_public_api_view_is_json_too(monkeypatch, db):
    monkeypatch.setattr("shop.apis.variant_list_for_catalog", failing_sql)
    response = Client(raise_request_exception=False).get("/api/products/")
    assert (response.status_code, response.json()["code"]) == (500, "server_error")
    assert_shows_nothing_inside(response.content.decode())


def test_an_unexpected_page_error_is_a_plain_500_page(monkeypatch, db):
    monkeypatch.setattr("shop.views.product_list_for_catalog", failing_sql)
    response = Client(raise_request_exception=False).get("/")
    assert response.status_code == 500
    assert response["Content-Type"].startswith("text/html")
    assert "Something went wrong" in response.content.decode()
    assert_shows_nothing_inside(response.content.decode())


def lost_connection(*args, **kwargs):
    """What MariaDB's client raises when the server restarts or fails over mid-request."""
    raise OperationalError(SERVER_GONE, "Server has gone away")


def queries_waiting_for(session, table: str) -> list[int]:
    """Connection ids of this database's queries waiting for ``table``, which another session locked."""
    cursor = session.cursor()
    cursor.execute(
        "SELECT id FROM information_schema.processlist WHERE db = DATABASE() "
        "AND state = 'Waiting for table metadata lock' AND info LIKE %s",
        [f"%{table}%"],
    )
    return [row[0] for row in cursor.fetchall()]


def test_a_page_whose_database_connection_is_killed_is_a_503_to_retry_not_a_500(transactional_db, caplog):
    """Killed for real (``KILL CONNECTION``) while the catalog's query waits for a table another session locked."""
    locker, killer = mysql_session(), mysql_session()
    locker.cursor().execute("LOCK TABLES shop_productvariant WRITE")
    answers = []

    def get_catalog():
        try:
            answers.append(Client(raise_request_exception=False).get("/"))
        finally:
            connection.close()

    page = threading.Thread(target=get_catalog)
    try:
        with caplog.at_level(logging.ERROR, logger="django.request"):
            page.start()
            wait_for(lambda: queries_waiting_for(killer, "shop_productvariant"), timeout=30, what="the catalog's query")
            [catalog_query] = queries_waiting_for(killer, "shop_productvariant")
            killer.cursor().execute(f"KILL CONNECTION {int(catalog_query)}")
            page.join(30)
    finally:
        locker.close()
        killer.close()
    [response] = answers
    assert response.status_code == 503 and response["Retry-After"] == "1"
    assert response["Content-Type"].startswith("text/html")
    assert "try again in a few seconds" in response.content.decode()
    assert_shows_nothing_inside(response.content.decode())
    assert "Lost connection to server during query" in caplog.text  # logged for the operators


def test_django_answers_a_lost_database_connection_under_api_in_the_error_shape_too():
    # DRF answers its own views (tests/faults/test_killed_mid_order.py); Django's handler the rest.
    request = RequestFactory().get("/api/orders/")
    try:
        lost_connection()
    except OperationalError:
        response = error_views.server_error(request)
    assert (response.status_code, response["Retry-After"]) == (503, "1")
    assert json.loads(response.content)["code"] == "database_unavailable"


@pytest.mark.parametrize("debug", [False, True], ids=["debug-off", "debug-on"])
def test_unknown_api_paths_are_json_404s_and_pages_are_html(db, settings, debug):
    settings.DEBUG = debug  # on, Django answers with its own HTML page instead of handler404 (bin/run)
    for path in ("/api/nope/", "/api/orders/1/nope/", "/api/nope"):
        response = Client().get(path)
        assert response.status_code == 404
        assert response.json() == {"code": "not_found", "detail": "Not found.", "fields": {}}
    page = Client().get("/nope/")
    assert page.status_code == 404 and page["Content-Type"].startswith("text/html")
    assert debug or "There is nothing here." in page.content.decode()


@pytest.mark.django_db
def test_password_reset_is_not_routed_because_the_shop_sends_no_email(client):
    assert client.post("/accounts/password_reset/", {"email": "a@example.com"}).status_code == 404


@pytest.mark.parametrize("ttl", ["0", "-5"])
def test_a_token_lifetime_that_is_not_positive_is_refused_at_start(ttl):
    env = {**os.environ, "API_TOKEN_TTL_SECONDS": ttl, "DJANGO_SETTINGS_MODULE": "config.settings"}
    run = subprocess.run([sys.executable, "manage.py", "check"], cwd=ROOT, env=env, capture_output=True, text=True)
    assert run.returncode != 0 and "API_TOKEN_TTL_SECONDS" in run.stderr
