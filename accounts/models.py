from django.conf import settings
from django.db import models

from core.collation import ExactEmailField
from core.models import BaseModel, TimestampedModel


class Account(BaseModel):
    """A customer's sign-up: the email they gave, one account per address, and when they proved it theirs.

    An account signed up on the site stays inactive (no login) until its email is verified
    (``accounts.services``). Users made otherwise (staff, ``createsuperuser``) have no row here.
    """

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="account")
    # In ``email_address``'s spelling, compared exactly: one account per mailbox whatever its letter case,
    # and a look-alike (``exämple.com``) is another mailbox. The UNIQUE index decides races.
    email = ExactEmailField(unique=True)
    email_verified_at = models.DateTimeField(null=True, blank=True)

    def __str__(self):
        return self.email

    @property
    def is_verified(self) -> bool:
        return self.email_verified_at is not None


class UsernameHold(TimestampedModel):
    """A username a sign-up asked for with an email that has an account already: nothing is made, but
    the name is taken as long as a new account's would be (until it lapses unverified), so a second
    sign-up with it tells nobody whether that email had an account (``accounts.services.account_signup``)."""

    # Lower case: held whatever the letter case, as ``username__iexact`` compares.
    username = models.CharField(max_length=150, unique=True)

    def __str__(self):
        return self.username
