"""A database or mail server away for a moment delays an account email, it does not lose it: the task
retries (``accounts.tasks``), and an email still failing then is logged."""

import smtplib

import pytest
from django.db import OperationalError
from rest_framework.test import APIClient

from accounts import emails
from accounts.services import Email
from accounts.tasks import send_account_email
from tests.accounts.conftest import PASSWORD

pytestmark = pytest.mark.django_db


def api(path: str, body):
    return APIClient().post(path, body, format="json")


@pytest.mark.parametrize(
    "error", [smtplib.SMTPServerDisconnected("gone"), ConnectionRefusedError(111, "refused"), OperationalError(2006)]
)
def test_a_transient_mail_or_database_error_is_retried_not_lost(inbox, monkeypatch, error):
    api("/api/accounts/signup/", {"username": "ann", "email": "ann@example.com", "password": PASSWORD})
    inbox.take()
    real, calls = emails._send, []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise error
        return real(*args, **kwargs)

    monkeypatch.setattr(emails, "_send", flaky)

    with pytest.raises(type(error)):
        emails.account_email_send(kind=Email.VERIFY_AGAIN, email="ann@example.com")
    assert send_account_email.apply(kwargs={"kind": Email.VERIFY_AGAIN, "email": "ann@example.com"}).get() is True
    assert len(inbox.take()) == 1


def test_an_email_still_failing_after_its_retries_is_logged(inbox, monkeypatch, caplog):
    api("/api/accounts/signup/", {"username": "ann", "email": "ann@example.com", "password": PASSWORD})

    def down(*args, **kwargs):
        raise smtplib.SMTPServerDisconnected("gone")

    monkeypatch.setattr(emails, "_send", down)

    result = send_account_email.apply(
        kwargs={"kind": Email.VERIFY_AGAIN, "email": "ann@example.com"},
        retries=send_account_email.max_retries,
        throw=False,
    )

    assert result.failed() and "account email verify_again not sent" in caplog.text
