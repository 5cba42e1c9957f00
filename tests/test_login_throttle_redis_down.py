"""Failed logins are counted in Redis; if Redis is down, logins go unthrottled rather than refused."""

import copy

import pytest
from rest_framework.test import APIClient

from tests.processes import RedisServer

RATE = 3


@pytest.fixture
def login_redis(tmp_path, settings):
    """The default cache, where login counts live, on a private Redis that the test can kill."""
    settings.LOGIN_THROTTLE_RATE = f"{RATE}/minute"
    with RedisServer(tmp_path) as redis:
        caches = copy.deepcopy(settings.CACHES)
        caches["default"]["LOCATION"] = redis.url
        settings.CACHES = caches
        yield redis


def token_login(password: str):
    return APIClient().post("/api/auth/token/", {"username": "alice", "password": password}, format="json")


def test_with_redis_down_logins_are_neither_throttled_nor_refused(customer, client, login_redis):
    for _ in range(RATE):
        assert token_login("wrong").status_code == 400
    assert token_login("pw-alice-123").status_code == 429  # counted in this Redis while it was up

    login_redis.kill()  # every count is gone with it, and nothing can be counted
    for _ in range(RATE + 1):  # over the rate
        assert token_login("wrong").json()["code"] == "invalid_input"
    assert token_login("pw-alice-123").status_code == 200
    response = client.post("/accounts/login/", {"username": "alice", "password": "pw-alice-123"})
    assert response.status_code == 302
    assert client.session["_auth_user_id"] == str(customer.pk)
