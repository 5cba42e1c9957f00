"""API tokens: django-rest-knox's (a hash stored, an expiry), refused cleanly, and revoked with the password."""

from django.conf import settings
from django.db.models.signals import post_save
from django.dispatch import receiver
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from knox import auth
from rest_framework import exceptions


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
