"""Who a buyer is, for the rules that count per buyer: the one place an email is read, checked and made canonical."""

import unicodedata
from typing import NamedTuple

from django.core.exceptions import ValidationError
from django.core.validators import validate_email

from core.errors import InvalidInput

EMAIL_MAX_LENGTH = 254  # RFC 5321's limit on an address's length, as Django's EmailField keeps it


def email_address(email: str) -> str:
    """The address as accounts and orders keep and match it, exactly (``core.collation``): NFKC (a
    full-width letter is the ASCII one mail servers deliver to), no surrounding space, lower case."""
    return unicodedata.normalize("NFKC", email.strip()).lower()


def email_canonical(email: str) -> str:
    """One spelling per mailbox: surrounding space, letter case and a ``+tag`` in the local part do not count.

    ``Ann+sale@Example.com `` and ``ann@example.com`` reach the same person, so a rule per guest email
    cannot be dodged by respelling it.
    """
    email = unicodedata.normalize("NFKC", email.strip()).casefold()
    local, at, domain = email.rpartition("@")
    if not at:
        return email
    return f"{local.partition('+')[0]}@{domain}"


def email_checked(email) -> str:
    """The address as kept (``email_address``), or ``InvalidInput`` if it is none: the check of every email
    a buyer or an account gives."""
    email = email_address(email) if isinstance(email, str) else ""
    try:
        validate_email(email)
    except ValidationError:
        raise InvalidInput(fields={"email": "Give a valid email address."}) from None
    if len(email) > EMAIL_MAX_LENGTH:
        raise InvalidInput(fields={"email": f"At most {EMAIL_MAX_LENGTH} characters."})
    return email


def _guest(email: str) -> str:
    return f"email:{email_canonical(email)}"


def _account(customer) -> str:
    return f"user:{customer.pk}"


def buyer_of(*, customer=None, email: str = "") -> str | None:
    """The buyer the limits per customer count: the account when logged in, else the guest's canonical
    email; None when neither is known yet (a guest's quote before the email is typed)."""
    if customer is not None:
        return _account(customer)
    if isinstance(email, str) and "@" in email:
        return _guest(email)
    return None


class Buyer(NamedTuple):
    """Who places an order: whose idempotency keys it uses, who the limits count, the email it keeps."""

    scope: str
    buyer: str
    email: str


def buyer_identify(*, customer, email) -> Buyer:
    """The account when logged in, else the guest's email (a valid one is required).

    A guest counts as their canonical email for the limits per customer (``email_canonical``), so a
    respelt address is the same customer; idempotency keys stay scoped by the address as given.
    """
    if email in (None, "") and customer is not None:
        return Buyer(_account(customer), _account(customer), "")
    if not isinstance(email, str):
        raise InvalidInput(fields={"email": "Give an email address."})
    email = email_checked(email)
    if customer is not None:
        return Buyer(_account(customer), _account(customer), email)
    return Buyer(f"email:{email}", _guest(email), email)
