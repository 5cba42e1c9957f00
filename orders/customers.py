"""Who a buyer is, for the rules that count per buyer (``core.emails`` reads, checks and canonicalises the email)."""

from typing import NamedTuple

from core.emails import email_canonical, email_checked
from core.errors import InvalidInput


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
