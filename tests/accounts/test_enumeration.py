"""Nobody learns from the shop which emails have accounts: sign-up, a new link and a reset answer alike
and at once whoever asks (the worker sends the emails, only to addresses with an account)."""

import re

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.test import APIClient

from accounts.services import SEND_ACCOUNT_EMAIL
from tests.accounts.conftest import PASSWORD
from tests.accounts.test_accounts import link_in, log_in, sign_up
from tests.smtp import text_of

pytestmark = pytest.mark.django_db

User = get_user_model()


def api(path: str, body):
    return APIClient().post(f"/api/accounts/{path}", body, format="json")


def test_sign_up_answers_alike_whether_the_email_has_an_account_and_tells_its_owner(inbox):
    new = api("signup/", {"username": "ann", "email": "ann@example.com", "password": PASSWORD})
    inbox.take()

    taken = api("signup/", {"username": "eve", "email": "ANN@example.com", "password": PASSWORD})
    page = sign_up(Client(), username="eve2", email="ann@example.com")

    assert (new.status_code, taken.status_code) == (202, 202) and new.content == taken.content
    assert "We sent a link to" in page.content.decode()
    assert not User.objects.filter(username__startswith="eve").exists()
    first, second = inbox.take()
    assert first["To"] == "ann@example.com" and first["Subject"] == "Someone tried to sign up with your email address"
    assert "ann" in text_of(first) and "/accounts/reset/" in text_of(first)
    owner = Client()  # the owner chooses a password through it: that proves the address too
    form = owner.get(link_in(second, "/accounts/reset/"), follow=True)
    owner.post(
        form.redirect_chain[-1][0], {"new_password1": "owners-passphrase-5", "new_password2": "owners-passphrase-5"}
    )
    assert log_in(Client(), "ann@example.com", "owners-passphrase-5").status_code == 302


def test_a_username_with_an_at_sign_is_refused(inbox):
    answer = api("signup/", {"username": "bob@example.com", "email": "mallory@example.com", "password": PASSWORD})

    assert answer.status_code == 400 and "username" in answer.json()["fields"]


@pytest.fixture
def queued(monkeypatch):
    """The account emails queued for the worker, which does not run here."""
    from config.celery import app

    tasks = []
    monkeypatch.setattr(app, "send_task", lambda name, args=None, kwargs=None, **options: tasks.append((name, kwargs)))
    return tasks


@pytest.mark.parametrize("path", ["verify/resend/", "password-reset/"])
def test_a_new_link_or_reset_is_queued_alike_for_any_address_and_sent_by_the_worker(queued, inbox, path):
    api("signup/", {"username": "ann", "email": "ann@example.com", "password": PASSWORD})
    queued.clear()

    answers = [api(path, {"email": email}) for email in ("ann@example.com", "nobody@example.com")]

    assert [answer.status_code for answer in answers] == [202, 202]
    assert inbox.take() == []  # nothing sent while the request waits
    assert [name for name, _ in queued] == [SEND_ACCOUNT_EMAIL, SEND_ACCOUNT_EMAIL]
    assert [kwargs["email"] for _, kwargs in queued] == ["ann@example.com", "nobody@example.com"]


def test_the_worker_sends_a_new_link_only_to_an_address_waiting_for_one(inbox):
    api("signup/", {"username": "ann", "email": "ann@example.com", "password": PASSWORD})
    inbox.take()

    for email in ("ann@example.com", "nobody@example.com", "ann@exämple.com"):
        api("verify/resend/", {"email": email})

    [message] = inbox.take()
    assert message["To"] == "ann@example.com" and re.search(r"/accounts/verify/\S+", text_of(message))


def test_a_sign_up_with_the_email_of_a_user_whose_password_logins_are_off_sends_no_reset_link(inbox):
    staff = User.objects.create_user(username="stan", email="stan@example.com")  # no usable password

    assert api("signup/", {"username": "eve", "email": "stan@example.com", "password": PASSWORD}).status_code == 202

    [message] = inbox.take()
    assert message["To"] == staff.email and "/accounts/reset/" not in text_of(message)
