"""Who a buyer is, for the rules that count per buyer."""

import unicodedata


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
