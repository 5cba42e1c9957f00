"""An account someone else signed up with your email never becomes theirs to log in to, and a verification
link is no login link: it verifies once, with the password chosen at sign-up, never after it changed."""

import re
import time
from datetime import UTC, datetime
from unittest import mock

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.test import APIClient

from orders.models import Order
from orders.services import order_place
from tests.accounts.conftest import PASSWORD
from tests.accounts.test_accounts import link_in, log_in, sign_up
from tests.smtp import text_of

pytestmark = pytest.mark.django_db

User = get_user_model()
SQUATTER_PASSWORD, OWNER_PASSWORD = "squatters-passphrase-1", "owners-own-passphrase-2"


def squat(inbox, email="vic@example.com"):
    """Mallory signs up with Vic's address; the link goes to Vic's mailbox, who has not asked for it."""
    sign_up(Client(), username="mallory", email=email, password=SQUATTER_PASSWORD)
    [message] = inbox.take()
    return message


def test_the_owner_takes_a_squatted_account_by_a_reset_and_only_the_owners_password_works(inbox, make_variant):
    make_variant(sku="MUG", stock=5)
    guest = order_place(email="vic@example.com", items=[{"sku": "MUG", "quantity": 1}], idempotency_key="g")
    squat(inbox)
    vic = Client()

    vic.post("/accounts/password-reset/", {"email": "vic@example.com"})

    [reset] = inbox.take()  # the account waits for its email to be proven: the mailbox holder may reset
    form = vic.get(link_in(reset, "/accounts/reset/"), follow=True)
    vic.post(form.redirect_chain[-1][0], {"new_password1": OWNER_PASSWORD, "new_password2": OWNER_PASSWORD})
    assert log_in(Client(), "vic@example.com", SQUATTER_PASSWORD).status_code == 200  # refused
    assert log_in(Client(), "mallory", SQUATTER_PASSWORD).status_code == 200
    assert log_in(Client(), "vic@example.com", OWNER_PASSWORD).status_code == 302
    assert Order.objects.get(pk=guest.pk).customer.username == "mallory"  # the account's name, Vic's now


def test_following_a_squatters_link_without_its_password_verifies_nothing_and_logs_nobody_in(inbox, make_variant):
    make_variant(sku="MUG", stock=5)
    guest = order_place(email="vic@example.com", items=[{"sku": "MUG", "quantity": 1}], idempotency_key="g")
    link = link_in(squat(inbox), "/accounts/verify/")
    vic = Client()

    opened = vic.get(link)
    guessed = vic.post(link, {"password": "not-the-squatters"})

    assert "_auth_user_id" not in vic.session
    assert opened.status_code == 200 and 'name="password"' in opened.content.decode()
    assert guessed.status_code == 200 and "Reset the password" in guessed.content.decode()
    assert not User.objects.get(username="mallory").is_active
    assert Order.objects.get(pk=guest.pk).customer is None
    token = re.search(r"/accounts/verify/(\S+)/", link).group(1)
    api = APIClient().post("/api/accounts/verify/", {"token": token}, format="json")
    assert api.status_code == 400 and not User.objects.get(username="mallory").is_active


def test_an_unverified_account_lapses_and_a_new_sign_up_replaces_it(inbox, settings):
    squat(inbox)
    later = time.time() + settings.ACCOUNT_VERIFY_MAX_AGE_SECONDS + 60

    with mock.patch("django.utils.timezone.now", return_value=_aware(later)):
        page = sign_up(Client(), username="mallory", email="vic@example.com", password=OWNER_PASSWORD)

    assert "We sent a link to" in page.content.decode()
    [message] = inbox.take()
    assert message["Subject"] == "Confirm your email address"
    user = User.objects.get(username="mallory")
    assert user.check_password(OWNER_PASSWORD) and User.objects.count() == 1


def _aware(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, tz=UTC)


def test_a_verification_link_verifies_and_logs_in_once(inbox):
    sign_up(Client())
    link = link_in(inbox.take()[0], "/accounts/verify/")
    ann = Client()

    done = ann.post(link, {"password": PASSWORD})

    assert done.status_code == 302 and ann.get("/accounts/").status_code == 200
    for visitor in (Client(), Client()):
        again = visitor.get(link)
        assert again.status_code == 410 and "_auth_user_id" not in visitor.session
        assert visitor.post(link, {"password": PASSWORD}).status_code == 410
        assert "_auth_user_id" not in visitor.session


def test_a_verification_link_is_dead_once_the_password_changed(inbox):
    sign_up(Client())
    [message] = inbox.take()
    link = link_in(message, "/accounts/verify/")
    user = User.objects.get(username="ann")
    user.set_password("a-changed-passphrase-3")
    user.save()

    visitor = Client()
    answers = [visitor.get(link).status_code, visitor.post(link, {"password": "a-changed-passphrase-3"}).status_code]

    assert answers == [410, 410] and "_auth_user_id" not in visitor.session
    assert not User.objects.get(username="ann").is_active


def test_through_the_api_too_a_reset_verifies_a_squatted_account_with_the_owners_password(inbox):
    api = APIClient()
    api.post(
        "/api/accounts/signup/",
        {"username": "mallory", "email": "vic@example.com", "password": SQUATTER_PASSWORD},
        format="json",
    )
    inbox.take()

    assert api.post("/api/accounts/password-reset/", {"email": "vic@example.com"}, format="json").status_code == 202
    uid, token = re.search(r"/accounts/reset/([^/]+)/([^/]+)/", text_of(inbox.take()[0])).groups()
    done = api.post(
        "/api/accounts/password-reset/confirm/",
        {"uid": uid, "token": token, "new_password": OWNER_PASSWORD},
        format="json",
    )

    assert done.status_code == 200 and done.json()["email_verified"] is True
    for password, answer in ((SQUATTER_PASSWORD, 400), (OWNER_PASSWORD, 200)):
        login = api.post("/api/auth/token/", {"username": "vic@example.com", "password": password}, format="json")
        assert login.status_code == answer, password
