"""Tables that only grow, kept bounded: API tokens and sessions (the shop's own rows are swept by
``orders.services.pruning``)."""

import logging

from django.conf import settings
from django.contrib.sessions.models import Session
from django.utils import timezone
from knox.models import AuthToken

from core.db import delete_in_batches

logger = logging.getLogger(__name__)


def api_token_create(*, user) -> tuple[AuthToken, str]:
    """A new API token for ``user`` and its secret; beyond ``API_TOKENS_PER_USER`` live tokens the oldest go.

    Every login makes a token, and knox looks at each of a user's tokens on every authenticated
    request: without a bound, a script that logs in often slows its own account down for good.
    """
    token, secret = AuthToken.objects.create(user)
    kept = AuthToken.objects.filter(user=user).order_by("-created", "-pk")[: settings.API_TOKENS_PER_USER]
    revoked, _ = AuthToken.objects.filter(user=user).exclude(pk__in=list(kept.values_list("pk", flat=True))).delete()
    if revoked:
        logger.info(
            "user %s: %d oldest API token(s) revoked (at most %d)", user.pk, revoked, settings.API_TOKENS_PER_USER
        )
    return token, secret


def api_token_list_delete_expired() -> int:
    """Delete expired API tokens (knox deletes one only when its user authenticates again)."""
    return delete_in_batches(AuthToken.objects.filter(expiry__lt=timezone.now()))


def session_list_delete_expired() -> int:
    """Delete expired sessions (guest carts, checkout keys): Django's ``clearsessions``, in batches."""
    return delete_in_batches(Session.objects.filter(expire_date__lt=timezone.now()))
