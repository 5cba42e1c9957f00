"""Who an email or a login name is: the one place users are looked up by them, each exactly as spelt
(``orders.customers.email_address``, ``core.collation``), so a look-alike address finds nobody."""

from django.contrib.auth import get_user_model
from django.db.models.functions import Lower

from accounts.models import UsernameHold
from core.collation import Exact
from core.emails import email_address


def user_by_email(email) -> "get_user_model() | None":
    """The one user with this email: an account's as signed up, or a user staff made, letter case aside.
    None for nobody's, or several users' (an address staff gave twice logs in nobody by email)."""
    if not isinstance(email, str) or "@" not in email:
        return None
    users = get_user_model()._default_manager.alias(email_exact=Exact(Lower("email")))
    found = list(users.filter(email_exact=email_address(email))[:2])
    return found[0] if len(found) == 1 else None


def user_for_login(name) -> "get_user_model() | None":
    """The user a login name means, as logging in and its throttle both resolve it: an email (with an
    ``@``) is the user it belongs to, else (and for older usernames with an ``@``) the username, which
    the database compares as its collation does."""
    if not isinstance(name, str) or not name.strip():
        return None
    name = name.strip()
    if "@" in name and (user := user_by_email(name)) is not None:
        return user
    user_model = get_user_model()
    try:
        return user_model._default_manager.get_by_natural_key(name)
    except user_model.DoesNotExist:
        return None


def username_taken(username: str) -> bool:
    """Whether a sign-up may not have ``username``: a user has it, or a sign-up holds it (``UsernameHold``),
    letter case aside."""
    return (
        get_user_model()._default_manager.filter(username__iexact=username).exists()
        or UsernameHold.objects.filter(username=username.lower()).exists()
    )
