"""Customer accounts: sign-up, proving the email, and what a proven email brings: the account can log
in, and the guest orders placed with that email become its orders.

Whoever proves the email also holds the password (docs/design.md#accounts): a verification link is
followed by the password chosen at sign-up, or the mailbox holder chooses one through a password reset,
which proves the email as well. So an account someone else signed up with your address never becomes
theirs to log in to, and its password is yours once you take it. A link verifies once, and no longer
once the password changed. Sign-up answers the same whether the email has an account; the emails go
from the worker (``accounts.tasks``), so no answer tells or takes longer for who has an account.
"""

import logging
from datetime import timedelta

from celery import current_app
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.contrib.auth.password_validation import validate_password
from django.core import signing
from django.core.exceptions import ValidationError
from django.db import IntegrityError, transaction
from django.db.models import ProtectedError
from django.utils import timezone
from django.utils.crypto import constant_time_compare, salted_hmac

from accounts.errors import (
    UsernameTaken,
    VerificationLinkExpired,
    VerificationLinkInvalid,
    VerificationLinkUsed,
    VerificationPasswordWrong,
)
from accounts.models import Account, UsernameHold
from accounts.selectors import user_by_email, username_taken
from core.emails import email_address, email_checked
from core.errors import InvalidInput
from orders.services import order_list_claim

logger = logging.getLogger(__name__)

VERIFY_SALT = "accounts.verify-email"
SEND_ACCOUNT_EMAIL = "accounts.tasks.send_account_email"
User = get_user_model()


class Email:
    """The account emails the worker sends (``accounts.emails``): to a user, or to an address."""

    VERIFY = "verify"  # the verification link, to an account waiting for it
    SIGNUP_TRIED = "signup_tried"  # someone signed up with the address of an account: its owner is told
    VERIFY_AGAIN = "verify_again"  # a new link asked for an address
    RESET = "reset"  # a password reset asked for an address


def account_signup(*, username: str, email: str, password: str) -> None:
    """Sign up an account that logs in once its email is proven, and have the link emailed.

    An email that has an account already is answered alike (no account made; its owner is emailed that
    someone tried, and how to get in): the caller learns nothing about whose email it is. The password
    is hashed either way, so neither does the time taken, and the username is held (``UsernameHold``)
    as a new account would take it, so neither does a second sign-up with that name. ``InvalidInput``
    for what Django's validators refuse; ``UsernameTaken`` for a name a user has or a sign-up holds. An
    account that never proved its email, and a hold, lapse after ``ACCOUNT_VERIFY_MAX_AGE_SECONDS``: a
    new sign-up may take the username or email.
    """
    username, email = _username_checked(username), email_checked(email)
    try:
        validate_password(password, user=User(username=username, email=email))
    except ValidationError as exc:
        raise InvalidInput(fields={"password": " ".join(exc.messages)}) from None
    encoded = make_password(password)
    _account_list_delete_lapsed(username=username, email=email)
    if username_taken(username):
        raise UsernameTaken()
    if (owner := user_by_email(email)) is not None:
        _username_hold(username)
        _email_send(Email.SIGNUP_TRIED, user_id=owner.pk)
        return
    try:
        with transaction.atomic():
            user = User.objects.create_user(username=username, email=email, is_active=False)
            user.password = encoded
            user.save(update_fields=["password"])
            account = Account.objects.create(user=user, email=email)
    except IntegrityError:  # another sign-up took the username or the email meanwhile
        if username_taken(username):
            raise UsernameTaken() from None
        if (owner := user_by_email(email)) is not None:
            _username_hold(username)
            _email_send(Email.SIGNUP_TRIED, user_id=owner.pk)
        return
    logger.info("account %s signed up; verification link to be sent", account.user_id)
    _email_send(Email.VERIFY, user_id=account.user_id)


def account_email_request(*, kind: str, email: str) -> None:
    """Have the worker send a new verification link (``Email.VERIFY_AGAIN``) or a password reset
    (``Email.RESET``) to ``email``, if it has an account waiting for it: the caller is answered alike,
    and at once, either way."""
    _email_send(kind, email=email)


def account_verification_token(*, account: Account) -> str:
    """The token of a verification link: signed, dated, and good only while the account is unverified
    and keeps the password it had (``_account_state``)."""
    return signing.dumps(
        {"user": account.user_id, "email": account.email, "state": _account_state(account)}, salt=VERIFY_SALT
    )


def account_verification_check(*, token: str) -> Account:
    """The account a verification link may verify now. ``VerificationLinkExpired`` after
    ``ACCOUNT_VERIFY_MAX_AGE_SECONDS``; ``VerificationLinkUsed`` once verified (or its password changed);
    ``VerificationLinkInvalid`` for a link not ours."""
    try:
        claim = signing.loads(token, salt=VERIFY_SALT, max_age=settings.ACCOUNT_VERIFY_MAX_AGE_SECONDS)
    except signing.SignatureExpired:
        raise VerificationLinkExpired() from None
    except signing.BadSignature:
        raise VerificationLinkInvalid() from None
    account = Account.objects.select_related("user").filter(user_id=claim.get("user")).first()
    if account is None or account.email != claim.get("email"):
        raise VerificationLinkInvalid()
    if not constant_time_compare(_account_state(account), str(claim.get("state", ""))):
        raise VerificationLinkUsed()
    return account


def account_verify(*, token: str, password: str) -> Account:
    """Prove the email with its link and the account's password: the account may log in, and that
    email's guest orders become its orders. Once: the link is used then. ``VerificationPasswordWrong``
    if the password is not the account's (whoever holds only the mailbox resets the password instead:
    ``account_verify_by_reset``), and ``account_verification_check``'s refusals."""
    account = account_verification_check(token=token)
    if not isinstance(password, str) or not account.user.check_password(password):
        raise VerificationPasswordWrong()
    with transaction.atomic():
        locked = Account.objects.select_for_update().select_related("user").get(pk=account.pk)
        if _account_state(locked) != _account_state(account):  # verified or changed meanwhile
            raise VerificationLinkUsed()
        _account_verified(locked)
    return locked


def account_verify_by_reset(*, user) -> bool:
    """A password reset proves the mailbox too: an unverified account whose email the reset went to is
    verified (it may log in, its guest orders are claimed) with the password its holder just chose.
    False for a user with nothing to verify."""
    with transaction.atomic():
        account = Account.objects.select_for_update().select_related("user").filter(user_id=user.pk).first()
        if account is None or account.is_verified or email_address(user.email) != account.email:
            return False
        _account_verified(account)
    return True


def _account_verified(account: Account) -> None:
    account.email_verified_at = timezone.now()
    account.save(update_fields=["email_verified_at", "updated_at"])
    User.objects.filter(pk=account.user_id).update(is_active=True)
    account.user.is_active = True
    claimed = order_list_claim(customer=account.user, email=account.email)
    logger.info("account %s verified its email; %d guest order(s) claimed", account.user_id, claimed)


def _account_state(account: Account) -> str:
    """What a verification link is bound to: the account still unverified, with the same password."""
    value = f"{account.user_id}|{account.user.password}|{account.email_verified_at}"
    return salted_hmac(VERIFY_SALT, value, algorithm="sha256").hexdigest()[:32]


def _username_hold(username: str) -> None:
    """Hold ``username`` as a sign-up that made its account would; one held already stays as it is."""
    try:
        with transaction.atomic():
            UsernameHold.objects.get_or_create(username=username.lower())
    except IntegrityError:  # held meanwhile by another sign-up
        pass


def _account_list_delete_lapsed(*, username: str, email: str) -> None:
    """Delete the accounts with this username or email that never proved their email in time, and a
    hold of the username as old."""
    lapsed_before = timezone.now() - timedelta(seconds=settings.ACCOUNT_VERIFY_MAX_AGE_SECONDS)
    UsernameHold.objects.filter(username=username.lower(), created_at__lt=lapsed_before).delete()
    stale = Account.objects.filter(email_verified_at=None, created_at__lt=lapsed_before, user__is_active=False)
    by_email = user_by_email(email)
    for account in stale.filter(user__username__iexact=username) | stale.filter(user_id=getattr(by_email, "pk", 0)):
        try:
            account.user.delete()
        except ProtectedError:  # something refers to it after all: it stays
            continue
        logger.info("unverified account %s lapsed, replaced by a new sign-up", account.user_id)


def _email_send(kind: str, *, user_id: int | None = None, email: str | None = None) -> None:
    """Queue an account email for the worker; a broker that is down is logged (the buyer may ask again)."""
    try:
        current_app.send_task(SEND_ACCOUNT_EMAIL, kwargs={"kind": kind, "user_id": user_id, "email": email})
    except Exception:
        logger.exception("an account email (%s) could not be queued", kind)


def _username_checked(username) -> str:
    field = User._meta.get_field("username")
    if not isinstance(username, str) or not username.strip():
        raise InvalidInput(fields={"username": "Choose a username."})
    username = username.strip()
    if "@" in username:  # a name with an @ would read as someone's email at login
        raise InvalidInput(fields={"username": "A username has no @: log in by email with your email."})
    try:
        field.run_validators(username)
    except ValidationError as exc:
        raise InvalidInput(fields={"username": " ".join(exc.messages)}) from None
    if len(username) > field.max_length:
        raise InvalidInput(fields={"username": f"At most {field.max_length} characters."})
    return username
