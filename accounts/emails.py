"""The account emails, sent by the worker (``accounts.tasks``): a request only queues them, so whether an
address has an account changes neither the answer nor the time it takes."""

import logging
from urllib.parse import urlsplit

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.forms import PasswordResetForm
from django.contrib.auth.tokens import default_token_generator
from django.core.mail import EmailMultiAlternatives
from django.db import OperationalError
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.encoding import force_bytes
from django.utils.http import urlsafe_base64_encode

from accounts.models import Account
from accounts.selectors import user_by_email
from accounts.services import Email, account_verification_token

logger = logging.getLogger(__name__)

# What may pass: a database or mail server away for a moment. They reach the task, which retries them
# (``accounts.tasks``); OSError covers smtplib's errors and a refused connection.
TRANSIENT_ERRORS = (OperationalError, OSError)


def account_email_send(*, kind: str, user_id: int | None = None, email: str | None = None) -> bool:
    """Send the account email ``kind`` (``accounts.services.Email``) to the user, or for the address.
    False if there is nobody to send it to, or it cannot be made (logged: the buyer may ask again);
    ``TRANSIENT_ERRORS`` are raised, for the task to retry."""
    try:
        if kind == Email.VERIFY:
            return _verification_send(Account.objects.select_related("user").filter(user_id=user_id).first())
        if kind == Email.SIGNUP_TRIED:
            return _signup_tried_send(get_user_model()._default_manager.filter(pk=user_id).first())
        if kind == Email.VERIFY_AGAIN:
            user = user_by_email(email)
            return _verification_send(
                Account.objects.filter(user=user).select_related("user").first() if user else None
            )
        if kind == Email.RESET:
            form = _ResetSender(data={"email": email})
            if form.is_valid():
                form.save(**reset_link_options())
            return form.sent
    except TRANSIENT_ERRORS:
        raise
    except Exception:
        logger.exception("account email %s could not be sent", kind)
        return False
    raise ValueError(f"no such account email: {kind}")


def reset_link_options() -> dict:
    """Where reset links point: the shop's public address (``SHOP_URL``), whatever host the request named."""
    shop = urlsplit(settings.SHOP_URL)
    return {"domain_override": shop.netloc, "use_https": shop.scheme == "https"}


def _verification_send(account: Account | None) -> bool:
    if account is None or account.is_verified:
        return False
    token = account_verification_token(account=account)
    context = {
        "account": account,
        "link": _shop_url(reverse("account-verify", args=[token])),
        "token": token,
        "hours": settings.ACCOUNT_VERIFY_MAX_AGE_SECONDS // 3600,
        "reset_link": _shop_url(reverse("password_reset")),
    }
    _send("Confirm your email address", "accounts/email/verify", context, to=account.email)
    return True


def _signup_tried_send(user) -> bool:
    """Someone signed up with the address of ``user``: they are told, with the ways in (a reset link, if
    one may go to them, also proves the address of an account never verified)."""
    if user is None or not user.email:
        return False
    resettable = _resettable(user)
    uid, token = urlsafe_base64_encode(force_bytes(user.pk)), default_token_generator.make_token(user)
    context = {
        "user": user,
        "login_link": _shop_url(reverse("login")),
        "reset_link": _shop_url(reverse("password_reset_confirm", kwargs={"uidb64": uid, "token": token}))
        if resettable
        else "",
        "hours": settings.PASSWORD_RESET_TIMEOUT // 3600,
    }
    _send("Someone tried to sign up with your email address", "accounts/email/signup_tried", context, to=user.email)
    return True


class _ResetSender(PasswordResetForm):
    """Django's reset email, to the one user of the address (``user_by_email``, exactly as spelt): an
    active one, or one whose account waits to prove its email (the reset proves it: the mailbox holder
    chooses the password)."""

    sent = False

    def get_users(self, email):
        user = user_by_email(email)
        return [user] if user is not None and _resettable(user) else []

    def send_mail(self, *args, **kwargs):
        super().send_mail(*args, **kwargs)
        self.sent = True


def _resettable(user) -> bool:
    """Whether a reset link may go to ``user``: one whose password logs in (staff may disable that), and
    who is active or waits to prove its email."""
    if not user.has_usable_password():
        return False
    return user.is_active or Account.objects.filter(user=user, email_verified_at=None).exists()


def _shop_url(path: str) -> str:
    return f"{settings.SHOP_URL.rstrip('/')}{path}"


def _send(subject: str, template: str, context: dict, *, to: str) -> None:
    message = EmailMultiAlternatives(subject=subject, body=render_to_string(f"{template}.txt", context), to=[to])
    message.attach_alternative(render_to_string(f"{template}.html", context), "text/html")
    message.send()
