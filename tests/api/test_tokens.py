"""API tokens: issued as before, stored hashed, expiring, revocable, and revoked with the password."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db


def login(username="alice", password="pw-alice-123") -> dict:
    response = APIClient().post("/api/auth/token/", {"username": username, "password": password}, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def orders_with(token: str):
    return APIClient().get("/api/orders/", HTTP_AUTHORIZATION=f"Token {token}")


def test_clients_keep_their_request_and_header(customer):
    body = login()
    assert set(body) >= {"token"} and len(body["token"]) >= 40
    assert orders_with(body["token"]).status_code == 200


def test_the_database_keeps_no_token_in_clear(customer):
    token = login()["token"]
    with connection.cursor() as cursor:
        tables = [t for t in connection.introspection.table_names(cursor) if "token" in t]
        stored = []
        for table in tables:
            cursor.execute(f"SELECT * FROM {connection.ops.quote_name(table)}")
            stored += [str(value) for row in cursor.fetchall() for value in row]
    assert stored  # the token is recorded...
    assert not any(token in value or token[15:] in value for value in stored)  # ...but not as itself


def test_a_token_expires_after_its_ttl(customer, settings):
    body = login()
    lifetime = timedelta(seconds=settings.API_TOKEN_TTL_SECONDS)
    assert settings.API_TOKEN_TTL_SECONDS == 86400
    from knox.models import AuthToken

    token = AuthToken.objects.get(user=customer)
    assert abs(token.expiry - token.created - lifetime) < timedelta(seconds=5)
    AuthToken.objects.filter(pk=token.pk).update(expiry=token.created - timedelta(seconds=1))  # its day is over
    response = orders_with(body["token"])
    assert response.status_code == 401 and response.json()["code"] == "authentication_failed"
    assert response["WWW-Authenticate"] == "Token"


def test_revoking_a_token_ends_it_and_only_it(customer):
    first, second = login()["token"], login()["token"]
    revoked = APIClient().post("/api/auth/token/revoke/", HTTP_AUTHORIZATION=f"Token {first}")
    assert revoked.status_code == 204
    assert orders_with(first).status_code == 401
    assert orders_with(second).status_code == 200
    again = APIClient().post("/api/auth/token/revoke/", HTTP_AUTHORIZATION=f"Token {first}")
    assert again.status_code == 401  # a replay finds nothing to revoke


def test_changing_the_password_revokes_every_token_of_the_user(customer, bob):
    tokens = [login()["token"], login()["token"]]
    bobs = login("bob", "pw-bob-123")["token"]
    customer.set_password("a-new-pw-456")
    customer.save()
    assert [orders_with(token).status_code for token in tokens] == [401, 401]
    assert orders_with(bobs).status_code == 200
    assert orders_with(login("alice", "a-new-pw-456")["token"]).status_code == 200


def test_a_password_changed_in_the_admin_revokes_the_tokens(customer, admin_user):
    token = login()["token"]
    admin = Client()
    admin.force_login(admin_user)
    url = reverse("admin:auth_user_password_change", args=[customer.pk])
    response = admin.post(url, {"password1": "a-new-pw-456", "password2": "a-new-pw-456", "usable_password": "true"})
    assert response.status_code == 302
    assert orders_with(token).status_code == 401


def test_saving_a_user_without_a_new_password_keeps_the_tokens(customer):
    token = login()["token"]
    customer.first_name = "Alice"
    customer.save()
    assert orders_with(token).status_code == 200


def test_a_token_that_is_not_utf8_is_refused_not_a_500(customer):
    response = APIClient().get("/api/orders/", HTTP_AUTHORIZATION="Token caf\xe9")
    assert response.status_code == 401 and response.json()["code"] == "authentication_failed"


def test_disabling_password_logins_revokes_the_tokens(customer):
    token = login()["token"]
    customer.set_unusable_password()  # the admin's "disable password-based authentication" does this
    customer.save()
    assert orders_with(token).status_code == 401


def test_a_user_keeps_at_most_the_newest_tokens_and_older_logins_are_revoked(customer, settings):
    """Knox looks at each of a user's tokens on every request: the count a user holds stays bounded."""
    settings.API_TOKENS_PER_USER = 3
    tokens = [login()["token"] for _ in range(5)]

    assert [orders_with(token).status_code for token in tokens] == [401, 401, 200, 200, 200]
    assert customer.auth_token_set.count() == 3
