"""An email address as the shop keeps, compares and counts it: the one place an email is read, checked and
made canonical (orders count buyers by it, accounts match addresses by it, a drop's line admits one place per it)."""

import unicodedata

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
