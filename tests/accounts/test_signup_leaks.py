"""Sign-up tells nobody whether an email has an account, not even through what follows it: a login with
the sign-up's password, or a second sign-up with its username, answers the same either way."""

import pytest
from django.test import Client
from rest_framework.test import APIClient

from tests.accounts.conftest import PASSWORD
from tests.accounts.test_accounts import log_in, sign_up

pytestmark = pytest.mark.django_db


def api(path: str, body):
    return APIClient().post(path, body, format="json")


def test_a_login_with_a_fresh_sign_ups_password_answers_as_when_the_email_was_taken(inbox):
    api("/api/accounts/signup/", {"username": "ann", "email": "ann@example.com", "password": "anns-own-pass-77"})
    api("/api/accounts/signup/", {"username": "eve1", "email": "ann@example.com", "password": PASSWORD})
    api("/api/accounts/signup/", {"username": "eve2", "email": "free@example.com", "password": PASSWORD})

    taken, free = (log_in(Client(), email) for email in ("ann@example.com", "free@example.com"))
    tokens = [
        api("/api/auth/token/", {"username": e, "password": PASSWORD}) for e in ("ann@example.com", "free@example.com")
    ]

    assert (taken.status_code, free.status_code) == (200, 200)
    assert taken.context["form"].non_field_errors() == free.context["form"].non_field_errors()
    assert "not confirmed yet" in str(free.context["form"].non_field_errors())
    assert [t.status_code for t in tokens] == [400, 400] and tokens[0].json() == tokens[1].json()


@pytest.mark.parametrize("second", ["api", "page"])
def test_a_username_signed_up_with_a_taken_email_is_held_as_a_new_accounts_is(inbox, second):
    api("/api/accounts/signup/", {"username": "ann", "email": "ann@example.com", "password": PASSWORD})
    api("/api/accounts/signup/", {"username": "zq91", "email": "ann@example.com", "password": PASSWORD})
    api("/api/accounts/signup/", {"username": "zq92", "email": "free@example.com", "password": PASSWORD})

    if second == "api":
        answers = [
            api("/api/accounts/signup/", {"username": name, "email": f"{name}@fresh.example", "password": PASSWORD})
            for name in ("zq91", "zq92")
        ]
        assert [a.status_code for a in answers] == [409, 409] and answers[0].json() == answers[1].json()
    else:
        pages = [sign_up(Client(), username=name, email=f"{name}@fresh.example") for name in ("ZQ91", "ZQ92")]
        assert ["We sent a link to" in page.content.decode() for page in pages] == [False, False]
        assert pages[0].context["form"].errors == pages[1].context["form"].errors


def test_a_held_username_lapses_as_an_unverified_account_does(inbox, settings):
    api("/api/accounts/signup/", {"username": "ann", "email": "ann@example.com", "password": PASSWORD})
    api("/api/accounts/signup/", {"username": "zq91", "email": "ann@example.com", "password": PASSWORD})
    settings.ACCOUNT_VERIFY_MAX_AGE_SECONDS = 0

    again = api("/api/accounts/signup/", {"username": "zq91", "email": "zq91@fresh.example", "password": PASSWORD})

    assert again.status_code == 202
