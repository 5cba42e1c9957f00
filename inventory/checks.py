"""System checks for lock settings under which a buyer could be told something false."""

from django.conf import settings
from django.core.checks import Error, register


@register("locks")
def lock_settings(**kwargs) -> list[Error]:
    """A served buyer waits up to a TTL for its holder's answer; a queued one gives up before a TTL."""
    errors = []
    if settings.LOCK_WAIT_SOCKET_TIMEOUT_SECONDS <= settings.LOCK_TTL_SECONDS:
        errors.append(
            Error(
                "LOCK_WAIT_SOCKET_TIMEOUT_SECONDS must exceed LOCK_TTL_SECONDS.",
                hint="A buyer whose request a lock holder took waits on that socket for the answer as long as "
                "the holder may still commit; a shorter timeout cuts the wait and the buyer learns nothing.",
                id="inventory.E001",
            )
        )
    if settings.LOCK_WAIT_SECONDS >= settings.LOCK_TTL_SECONDS:
        errors.append(
            Error(
                "LOCK_WAIT_SECONDS must be less than LOCK_TTL_SECONDS.",
                hint="A buyer behind a holder that died must be told lock_timeout (nothing changed) before "
                "the dead holder's lock expires, not wait on a lease that will never be answered.",
                id="inventory.E002",
            )
        )
    return errors
