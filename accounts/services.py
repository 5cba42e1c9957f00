"""Customer accounts: sign-up, proving the email (a signed link that expires), and what a proven email
brings: the account can log in, and the guest orders placed with that email become its orders."""

import logging

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core import signing
from django.core.exceptions import ValidationError
from django.core.mail import EmailMultiAlternatives
from django.core.validators import validate_email
from django.db import IntegrityError, transaction
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils import timezone

from accounts.errors import EmailTaken, UsernameTaken, VerificationLinkExpired, VerificationLinkInvalid
from accounts.models import Account
from core.errors import InvalidInput
from orders.services import order_list_claim

logger = logging.getLogger(__name__)

VERIFY_SALT = "accounts.verify-email"
User = get_user_model()


def account_signup(*, username: str, email: str, password: str) -> Account:
    """Create an account that cannot log in until its email is verified, and send the link that verifies it.

    ``InvalidInput`` for a username, email or password Django's validators refuse; ``UsernameTaken``,
    ``EmailTaken`` (letter case aside) when another account has it, also when two sign up at once.
    """
    username, email = _username_checked(username), _email_checked(email)
    try:
        validate_password(password, user=User(username=username, email=email))
    except ValidationError as exc:
        raise InvalidInput(fields={"password": " ".join(exc.messages)}) from None
    if User.objects.filter(username__iexact=username).exists():
        raise UsernameTaken()
    if Account.objects.filter(email=email).exists() or User.objects.filter(email__iexact=email).exists():
        raise EmailTaken()
    try:
        with transaction.atomic():
            user = User.objects.create_user(username=username, email=email, password=password, is_active=False)
            account = Account.objects.create(user=user, email=email)
    except IntegrityError:  # another sign-up took the username or the email meanwhile
        if User.objects.filter(username__iexact=username).exists():
            raise UsernameTaken() from None
        raise EmailTaken() from None
    logger.info("account %s signed up (%s); verification sent", username, email)
    account_verification_send(account=account)
    return account


def account_verification_send(*, account: Account) -> bool:
    """Email the account its verification link (``ACCOUNT_VERIFY_MAX_AGE_SECONDS`` to use it). False if the
    mail server refused: logged, and the buyer may ask again (``account_verification_resend``)."""
    token = signing.dumps({"user": account.user_id, "email": account.email}, salt=VERIFY_SALT)
    link = f"{settings.SHOP_URL.rstrip('/')}{reverse('account-verify', args=[token])}"
    context = {
        "account": account,
        "link": link,
        "token": token,
        "hours": settings.ACCOUNT_VERIFY_MAX_AGE_SECONDS // 3600,
    }
    message = EmailMultiAlternatives(
        subject="Confirm your email address",
        body=render_to_string("accounts/email/verify.txt", context),
        to=[account.email],
    )
    message.attach_alternative(render_to_string("accounts/email/verify.html", context), "text/html")
    try:
        message.send()
    except Exception:
        logger.exception("the verification email of account %s could not be sent", account.user_id)
        return False
    return True


def account_verification_resend(*, email: str) -> None:
    """Send a new link if an account with ``email`` waits for one. Says nothing either way, so nobody
    learns from it which emails have accounts."""
    account = Account.objects.filter(email=_email_normal(email), email_verified_at=None).first()
    if account is not None:
        account_verification_send(account=account)


def account_verify(*, token: str) -> Account:
    """Prove the email the link was sent to: the account may log in, and that email's guest orders become
    its orders. Again: the same account, nothing more. ``VerificationLinkExpired`` after
    ``ACCOUNT_VERIFY_MAX_AGE_SECONDS``; ``VerificationLinkInvalid`` for a link not ours."""
    try:
        claim = signing.loads(token, salt=VERIFY_SALT, max_age=settings.ACCOUNT_VERIFY_MAX_AGE_SECONDS)
    except signing.SignatureExpired:
        raise VerificationLinkExpired() from None
    except signing.BadSignature:
        raise VerificationLinkInvalid() from None
    with transaction.atomic():
        account = Account.objects.select_for_update().select_related("user").filter(user_id=claim["user"]).first()
        if account is None or account.email != claim["email"]:
            raise VerificationLinkInvalid()
        if account.is_verified:
            return account
        now = timezone.now()
        Account.objects.filter(pk=account.pk).update(email_verified_at=now)
        User.objects.filter(pk=account.user_id).update(is_active=True)
        claimed = order_list_claim(customer=account.user, email=account.email)
    logger.info("account %s verified %s; %d guest order(s) claimed", account.user_id, account.email, claimed)
    account.refresh_from_db()
    account.user.refresh_from_db()
    return account


def _email_normal(email) -> str:
    return email.strip().lower() if isinstance(email, str) else ""


def _email_checked(email) -> str:
    email = _email_normal(email)
    try:
        validate_email(email)
    except ValidationError:
        raise InvalidInput(fields={"email": "Give a valid email address."}) from None
    if len(email) > 254:
        raise InvalidInput(fields={"email": "At most 254 characters."})
    return email


def _username_checked(username) -> str:
    field = User._meta.get_field("username")
    if not isinstance(username, str) or not username.strip():
        raise InvalidInput(fields={"username": "Choose a username."})
    username = username.strip()
    try:
        field.run_validators(username)
    except ValidationError as exc:
        raise InvalidInput(fields={"username": " ".join(exc.messages)}) from None
    if len(username) > field.max_length:
        raise InvalidInput(fields={"username": f"At most {field.max_length} characters."})
    return username
