"""Failed logins count against the account the name resolves to, however it is spelt, and against the
client: username, email and the email's letter cases share one budget."""

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from accounts.models import Account
from tests.accounts.conftest import PASSWORD

pytestmark = pytest.mark.django_db


@pytest.fixture
def ann(settings):
    settings.LOGIN_THROTTLE_RATE = "3/minute"
    user = get_user_model().objects.create_user(username="ann", email="ann@example.com", password=PASSWORD)
    Account.objects.create(user=user, email="ann@example.com", email_verified_at="2026-01-01T00:00:00Z")
    return user


def token_login(name: str, password: str, ip: str):
    return APIClient().post("/api/auth/token/", {"username": name, "password": password}, format="json", REMOTE_ADDR=ip)


def test_the_username_and_every_spelling_of_the_email_share_one_budget(ann, client):
    assert token_login("ann", "wrong", ip="10.1.0.1").status_code == 400
    assert token_login("ANN@example.com", "wrong", ip="10.1.0.2").status_code == 400
    assert client.post("/accounts/login/", {"username": " ann@EXAMPLE.com", "password": "x"}).status_code == 200

    refused = token_login("ann@example.com", PASSWORD, ip="10.1.0.4")

    assert refused.status_code == 429 and refused.json()["code"] == "throttled" and refused["Retry-After"]


def test_names_that_find_nobody_share_the_clients_budget(ann):
    for n in range(3):
        assert token_login(f"nobody{n}@example.com", "wrong", ip="10.1.1.1").status_code == 400

    assert token_login("ann", PASSWORD, ip="10.1.1.1").status_code == 429
    assert token_login("ann", PASSWORD, ip="10.1.1.2").status_code == 200


def test_passwords_tried_on_a_verification_link_count_against_the_accounts_budget(settings, inbox):
    from django.test import Client

    from tests.accounts.test_accounts import link_in, sign_up

    settings.LOGIN_THROTTLE_RATE = "3/minute"
    sign_up(Client(), username="cai", email="cai@example.com")
    link = link_in(inbox.take()[0], "/accounts/verify/")
    for n in range(3):
        assert Client(REMOTE_ADDR=f"10.2.0.{n}").post(link, {"password": f"guess-{n}"}).status_code == 200

    refused = Client(REMOTE_ADDR="10.2.0.9").post(link, {"password": PASSWORD})

    assert refused.status_code == 429 and refused["Retry-After"]
    assert token_login("cai", PASSWORD, ip="10.2.0.10").status_code == 429  # the same account's budget
    assert not get_user_model().objects.get(username="cai").is_active
