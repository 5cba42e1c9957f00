"""The account API for clients: sign up, verify with the emailed token, ask again, reset the password,
and keep the address book; the same rules as the pages (tests/accounts/test_accounts.py)."""

import re

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from orders.models import Order
from orders.services import order_place
from shipping.models import AddressBookEntry
from tests.accounts.conftest import PASSWORD
from tests.conftest import ADDRESS_DE, ADDRESS_US, client_for
from tests.smtp import text_of

pytestmark = pytest.mark.django_db

User = get_user_model()


def post(path: str, body, client=None):
    return (client or APIClient()).post(f"/api/accounts/{path}", body, format="json")


def test_sign_up_verify_with_the_token_and_log_in_for_an_api_token(inbox, make_variant):
    make_variant(sku="MUG", stock=5)
    guest = order_place(email="cai@example.com", items=[{"sku": "MUG", "quantity": 1}], idempotency_key="g")

    created = post("signup/", {"username": "cai", "email": "cai@example.com", "password": PASSWORD})
    again = post("signup/", {"username": "cai2", "email": "CAI@example.com", "password": PASSWORD})
    weak = post("signup/", {"username": "dee", "email": "dee@example.com", "password": "123"})
    wrong_type = post("signup/", {"username": 5, "email": "dee@example.com", "password": PASSWORD})

    assert created.status_code == 202 and not created.content
    assert again.status_code == 202 and not again.content  # the same answer: the owner is emailed instead
    assert weak.status_code == 400 and "password" in weak.json()["fields"]
    assert wrong_type.status_code == 400
    no_login = APIClient().post("/api/auth/token/", {"username": "cai", "password": PASSWORD}, format="json")
    assert no_login.status_code == 400  # not verified yet: no token
    [email, _owner_told] = inbox.take()
    token = re.search(r"/accounts/verify/(\S+)/", text_of(email)).group(1)

    wrong = post("verify/", {"token": token, "password": "not-the-password"})
    verified = post("verify/", {"token": token, "password": PASSWORD})
    forged = post("verify/", {"token": token[:-2] + "xx", "password": PASSWORD})
    again = post("verify/", {"token": token, "password": PASSWORD})

    assert wrong.status_code == 400 and "password" in wrong.json()["fields"]
    assert again.status_code == 410 and again.json()["code"] == "verification_used"
    assert verified.status_code == 200 and verified.json()["email_verified"] is True
    assert forged.status_code == 400 and forged.json()["code"] == "verification_invalid"
    assert Order.objects.get(pk=guest.pk).customer.username == "cai"
    login = APIClient().post("/api/auth/token/", {"username": "cai@example.com", "password": PASSWORD}, format="json")
    assert login.status_code == 200
    me = APIClient()
    me.credentials(HTTP_AUTHORIZATION=f"Token {login.json()['token']}")
    assert me.get("/api/accounts/me/").json()["username"] == "cai"


def test_a_new_link_and_a_password_reset_by_api_say_the_same_whoever_asks(inbox, customer, settings):
    post("signup/", {"username": "cai", "email": "cai@example.com", "password": PASSWORD})
    inbox.take()
    customer.email = "alice@example.com"
    customer.save()

    resent = post("verify/resend/", {"email": "cai@example.com"})
    unknown = post("verify/resend/", {"email": "nobody@example.com"})
    assert (resent.status_code, unknown.status_code) == (202, 202)
    assert [message["To"] for message in inbox.take()] == ["cai@example.com"]

    asked = post("password-reset/", {"email": "alice@example.com"})
    assert asked.status_code == 202 and post("password-reset/", {"email": "nobody@example.com"}).status_code == 202
    [email] = inbox.take()
    uid, token = re.search(r"/accounts/reset/([^/]+)/([^/]+)/", text_of(email)).groups()
    assert f"{settings.SHOP_URL}/accounts/reset/" in text_of(email)  # the shop's own address

    weak = post("password-reset/confirm/", {"uid": uid, "token": token, "new_password": "123"})
    done = post("password-reset/confirm/", {"uid": uid, "token": token, "new_password": "another-passphrase-7"})
    reused = post("password-reset/confirm/", {"uid": uid, "token": token, "new_password": "third-passphrase-9"})
    garbage = post("password-reset/confirm/", {"uid": "!!", "token": "x", "new_password": "another-passphrase-7"})

    assert weak.status_code == 400 and "new_password" in weak.json()["fields"]
    assert done.status_code == 200 and done.json()["username"] == "alice"
    assert reused.status_code == 400 and "token" in reused.json()["fields"]
    assert garbage.status_code == 400
    customer.refresh_from_db()
    assert customer.check_password("another-passphrase-7")


def test_the_address_book_through_the_api(customer, bob):
    mine, theirs = client_for(customer), client_for(bob)

    first = mine.post("/api/accounts/addresses/", {"address": ADDRESS_DE}, format="json")
    second = mine.post("/api/accounts/addresses/", {"address": ADDRESS_US, "is_default_billing": True}, format="json")
    bad = mine.post("/api/accounts/addresses/", {"address": {**ADDRESS_DE, "country": "XX"}}, format="json")

    assert first.status_code == 201 and first.json()["is_default_shipping"] is True
    assert second.status_code == 201 and second.json()["is_default_billing"] is True
    assert bad.status_code == 400 and "country" in str(bad.json()["fields"])
    listed = mine.get("/api/accounts/addresses/").json()
    assert [
        (entry["address"]["city"], entry["is_default_shipping"], entry["is_default_billing"]) for entry in listed
    ] == [
        ("Berlin", True, False),
        ("Mountain View", False, True),
    ]
    url = f"/api/accounts/addresses/{second.json()['id']}/"
    assert theirs.get(url).status_code == 404 and theirs.delete(url).status_code == 404
    moved = mine.patch(url, {"is_default_shipping": True}, format="json")
    assert moved.status_code == 200 and moved.json()["is_default_shipping"] is True
    assert AddressBookEntry.objects.filter(is_default_shipping=True).count() == 1
    assert mine.delete(url).status_code == 204
    assert AddressBookEntry.objects.get().is_default_shipping and AddressBookEntry.objects.get().is_default_billing
