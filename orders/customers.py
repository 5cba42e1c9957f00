"""Who a buyer is, for the rules that count per buyer."""

import unicodedata


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


def buyer_of(*, customer=None, email: str = "") -> str | None:
    """The buyer the limits per customer count: the account when logged in, else the guest's canonical
    email; None when neither is known yet (a guest's quote before the email is typed)."""
    if customer is not None:
        return f"user:{customer.pk}"
    if isinstance(email, str) and "@" in email:
        return f"email:{email_canonical(email.strip().lower())}"
    return None
