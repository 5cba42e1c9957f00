"""``core.tokens.token_account_id``, the one-query check of an API token the push process uses: it
accepts exactly the tokens knox's own authentication accepts, for the same account."""

from datetime import timedelta

import pytest
from django.utils import timezone
from knox.models import AuthToken
from rest_framework import exceptions

from core.tokens import TokenAuthentication, token_account_id

pytestmark = pytest.mark.django_db


def knox_says(token: bytes):
    try:
        return TokenAuthentication().authenticate_credentials(token)[0].pk
    except exceptions.AuthenticationFailed:
        return "refused"


def ours(token: bytes):
    try:
        return token_account_id(token)
    except exceptions.AuthenticationFailed:
        return "refused"


def test_it_agrees_with_knox_on_every_kind_of_token(customer, bob):
    _, good = AuthToken.objects.create(customer)
    expired_row, expired = AuthToken.objects.create(bob)
    AuthToken.objects.filter(pk=expired_row.pk).update(expiry=timezone.now() - timedelta(seconds=1))
    inactive_user = bob.__class__.objects.create_user("carol", "carol@example.com", "pw-carol-12345")
    _, inactive = AuthToken.objects.create(inactive_user)
    inactive_user.is_active = False
    inactive_user.save(update_fields=["is_active"])
    altered = good[:-1] + ("0" if good[-1] != "0" else "1")
    cases = {
        "good": (good.encode(), customer.pk),
        "expired": (expired.encode(), "refused"),
        "inactive user": (inactive.encode(), "refused"),
        "altered": (altered.encode(), "refused"),
        "same key, other secret": (good[:8].encode() + b"x" * 20, "refused"),
        "not utf-8": (b"\xff\xfe" * 10, "refused"),
        "empty": (b"", "refused"),
    }
    for name, (token, expected) in cases.items():
        assert (name, ours(token)) == (name, expected)
        assert (name, knox_says(token)) == (name, expected)


def test_it_reads_the_database_once(customer, django_assert_num_queries):
    _, token = AuthToken.objects.create(customer)
    with django_assert_num_queries(1):
        assert token_account_id(token.encode()) == customer.pk
