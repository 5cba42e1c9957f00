"""API tokens: django-rest-knox's (a hash stored, an expiry), refused cleanly, and revoked with the password."""

import binascii
from datetime import UTC
from hmac import compare_digest

from django.conf import settings
from django.db import connection
from django.db.models.signals import post_save
from django.dispatch import receiver
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from knox import auth
from knox.crypto import hash_token
from knox.settings import CONSTANTS
from rest_framework import exceptions

from core.sql import token_rows_statement


class TokenAuthentication(auth.TokenAuthentication):
    """``Authorization: Token <token>`` against knox's hashed, expiring tokens.

    A token that is not even UTF-8 is an invalid token (401), as DRF's own scheme answers it, not a 500.
    """

    def authenticate_credentials(self, token: bytes):
        try:
            token.decode("utf-8")
        except UnicodeDecodeError:
            raise exceptions.AuthenticationFailed("Invalid token.") from None
        return super().authenticate_credentials(token)


def token_account_id(token: bytes) -> int:
    """The account an API token names, checked as knox checks it (its digest compared in constant time,
    not expired, an active user) in one statement (``core.sql``), for a crowd's requests outside the app servers
    (``config.push``). Knox also deletes the user's other expired tokens on each check; here the prune
    sweep does (``prune_history``). ``AuthenticationFailed`` otherwise."""
    refused = exceptions.AuthenticationFailed("Invalid token.")
    try:
        text = token.decode("utf-8")
        digest = hash_token(text)
    except (UnicodeDecodeError, TypeError, ValueError, binascii.Error):
        raise refused from None
    with connection.cursor() as cursor:
        cursor.execute(*token_rows_statement(token_key=text[: CONSTANTS.TOKEN_KEY_LENGTH]))
        found = cursor.fetchall()
    now = timezone.now()
    for stored, expiry, user_id, active in found:
        expiry = parse_datetime(expiry) if isinstance(expiry, str) else expiry  # SQLite's cursor: text
        expiry = expiry if expiry is None or timezone.is_aware(expiry) else timezone.make_aware(expiry, UTC)
        if compare_digest(digest, stored) and (expiry is None or expiry > now):
            if not active:
                raise exceptions.AuthenticationFailed("User inactive or deleted.")
            return user_id
    raise refused


class TokenScheme(OpenApiAuthenticationExtension):
    """The API schema's name for the scheme: the one DRF's token scheme had, so clients see no change."""

    target_class = TokenAuthentication
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": 'Token-based authentication with required prefix "Token"',
        }


@receiver(post_save, sender=settings.AUTH_USER_MODEL)
def _tokens_revoke_on_password_change(sender, instance, created, **kwargs):
    """A new password, or none, ends every API token of the user: whoever held the old one holds nothing now.

    ``set_password`` marks the change until the save (``_password``, which Django itself reads to call
    the validators' ``password_changed``): so the admin, ``changepassword`` and ``set_password`` with
    ``save`` all revoke, while the hash upgrade Django makes at login does not. A user whose password
    logins are disabled (``set_unusable_password``, the admin's option) cannot log in for a token, so
    any token they hold is ended too.
    """
    changed = getattr(instance, "_password", None) is not None or not instance.has_usable_password()
    if not created and changed:
        instance.auth_token_set.all().delete()
