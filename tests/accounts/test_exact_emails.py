"""An email is an identity only as spelt: MariaDB's default collation calls ``bob@exämple.com`` and
``bob@example.com`` equal, and nothing that matches an email may (claims, sign-up, login, limits)."""

import re

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from accounts.models import Account
from orders.errors import LimitExceeded
from orders.models import Order
from orders.services import order_place
from tests.accounts.conftest import PASSWORD
from tests.smtp import text_of
from vouchers.errors import VoucherInvalid

pytestmark = pytest.mark.django_db

User = get_user_model()
REAL, LOOK_ALIKE = "bob@example.com", "bob@exämple.com"


def api(path: str, body):
    return APIClient().post(f"/api/accounts/{path}", body, format="json")


def sign_up_and_verify(inbox, *, username: str, email: str):
    assert api("signup/", {"username": username, "email": email, "password": PASSWORD}).status_code < 300
    [message] = inbox.take()
    token = re.search(r"/accounts/verify/(\S+)/", text_of(message)).group(1)
    verified = api("verify/", {"token": token, "password": PASSWORD})
    assert verified.status_code == 200, verified.json()
    return User.objects.get(username=username)


def test_verifying_a_look_alike_email_claims_none_of_the_real_owners_guest_orders(inbox, make_variant):
    make_variant(sku="MUG", stock=5)
    guest = order_place(email=REAL, items=[{"sku": "MUG", "quantity": 1}], idempotency_key="g")

    squatter = sign_up_and_verify(inbox, username="mallory", email=LOOK_ALIKE)

    assert Order.objects.get(pk=guest.pk).customer is None
    assert squatter.orders.count() == 0


def test_the_real_owner_may_sign_up_beside_a_look_alike_and_each_logs_in_by_their_own_email(inbox):
    sign_up_and_verify(inbox, username="mallory", email=LOOK_ALIKE)

    owner = sign_up_and_verify(inbox, username="bob", email=REAL)

    assert Account.objects.get(user=owner).email == REAL
    for name, who in (
        (REAL, "bob"),
        ("BOB@Example.com", "bob"),
        (LOOK_ALIKE, "mallory"),
        ("Bob@Exämple.COM", "mallory"),
    ):
        login = APIClient().post("/api/auth/token/", {"username": name, "password": PASSWORD}, format="json")
        assert login.status_code == 200 and _token_user(login) == who, name


def _token_user(login) -> str:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {login.json()['token']}")
    return client.get("/api/accounts/me/").json()["username"]


def test_a_look_alike_guest_neither_uses_up_nor_escapes_the_real_ones_limit_per_customer(make_variant):
    make_variant(sku="DROP", stock=10, max_per_customer=2)
    one = [{"sku": "DROP", "quantity": 1}]
    order_place(email=LOOK_ALIKE, items=one, idempotency_key="l1")
    order_place(email=REAL, items=one, idempotency_key="r1")

    order_place(email=REAL, items=one, idempotency_key="r2")  # bob holds 2 now: his own

    with pytest.raises(LimitExceeded):
        order_place(email=REAL, items=one, idempotency_key="r3")


def test_a_look_alike_guest_neither_uses_up_nor_escapes_the_real_ones_voucher_limit(make_variant, make_voucher):
    make_variant(sku="MUG", stock=10)
    make_voucher(code="ONCE2", limit_per_customer=2)
    one = [{"sku": "MUG", "quantity": 1}]
    order_place(email=LOOK_ALIKE, items=one, idempotency_key="l1", voucher="ONCE2")
    order_place(email=REAL, items=one, idempotency_key="r1", voucher="ONCE2")

    order_place(email=REAL, items=one, idempotency_key="r2", voucher="ONCE2")

    with pytest.raises(VoucherInvalid) as refused:
        order_place(email=REAL, items=one, idempotency_key="r3", voucher="ONCE2")
    assert refused.value.payload["reason"] == "limit_per_customer"


def test_a_user_staff_made_logs_in_by_its_email_in_any_case_but_not_by_a_look_alike(inbox):
    User.objects.create_user(username="stan", email="Bob@Example.com", password=PASSWORD)

    def token_user(name: str):
        login = APIClient().post("/api/auth/token/", {"username": name, "password": PASSWORD}, format="json")
        return _token_user(login) if login.status_code == 200 else login.status_code

    assert token_user("bob@example.com") == "stan"
    assert token_user(LOOK_ALIKE) == 400
    api("password-reset/", {"email": LOOK_ALIKE})
    assert inbox.take() == []  # a reset for a look-alike reaches nobody
    api("password-reset/", {"email": "BOB@example.com"})
    assert [message["To"] for message in inbox.take()] == [User.objects.get(username="stan").email]
