"""What a browser's session keeps for the checkout and order pages (``orders.views``): the idempotency key of
each checkout page shown, the email a key was submitted with while its outcome is unknown, and the orders
this browser placed as a guest (which it alone may see, pay and cancel without an account).

Each checkout page carries one key, kept while its order may have been placed: submitting it twice places
one order. After a definite refusal the page gets a fresh key, so its next submit is a new request; after
an unknown outcome it keeps its key, so the next submit replays the first (that returns the order if it
was placed, and places it once if not).
"""

import logging
import uuid
from contextlib import contextmanager

from django.db import InterfaceError, OperationalError, connection

from core.db import connection_lost
from core.errors import DatabaseUnavailable

SESSION_ORDERS = "orders"  # numbers of the orders this browser placed as a guest
SESSION_CHECKOUT_KEYS = "checkout_keys"  # idempotency key of each checkout page shown -> order number once placed
# The email each key was submitted with while its outcome is unknown: a guest's key is scoped by email,
# so its next submit must use the same one to find (or place once) the order.
SESSION_UNCONFIRMED = "checkout_unconfirmed"
SESSION_ADDRESS = "checkout_address"  # the shipping address of this browser's last order, offered next time
KEYS_KEPT = 20
GUEST_ORDERS_KEPT = 50

logger = logging.getLogger(__name__)


class CheckoutSession:
    """One browser's checkout keys and guest orders, in its Django session."""

    def __init__(self, request):
        self._session = request.session
        self._guest = not request.user.is_authenticated

    @property
    def guest_orders(self) -> list[str]:
        return self._session.get(SESSION_ORDERS, [])

    def placed_here(self, number: str) -> bool:
        """Whether this browser placed the order ``number`` as a guest."""
        return number in self.guest_orders

    def order_placed_by(self, key: str) -> str | None:
        """The number of the order the checkout page with ``key`` placed, if it did."""
        return self._session.get(SESSION_CHECKOUT_KEYS, {}).get(key)

    def issued(self, key: str) -> bool:
        """Whether ``key`` is a checkout page's shown to this browser (not one copied from another)."""
        return key in self._session.get(SESSION_CHECKOUT_KEYS, {})

    def email_for(self, *, key: str, email: str) -> str:
        """The email to submit ``key`` with: while its outcome is unknown, the one it was first submitted with."""
        unconfirmed = self._session.get(SESSION_UNCONFIRMED, {})
        return unconfirmed[key] if email and key in unconfirmed else email

    def remember_order(self, *, key: str, number: str) -> None:
        """The page with ``key`` placed order ``number``: a second submit finds it, and a guest's browser may
        see, pay and cancel it from now on."""
        self._session[SESSION_CHECKOUT_KEYS] = {**self._session.get(SESSION_CHECKOUT_KEYS, {}), key: number}
        self._session.pop(SESSION_UNCONFIRMED, None)
        if self._guest:
            self._session[SESSION_ORDERS] = [*self.guest_orders, number][-GUEST_ORDERS_KEPT:]

    @property
    def last_address(self) -> dict | None:
        return self._session.get(SESSION_ADDRESS)

    def remember_address(self, address: dict | None) -> None:
        if address:
            self._session[SESSION_ADDRESS] = address

    def issue_key(self, *, unconfirmed: str | None = None, email: str = "") -> str:
        """The key to show the checkout page with: ``unconfirmed``, the key of a submit whose outcome is
        unknown (remembered with its ``email``), or else a fresh one."""
        key = unconfirmed or uuid.uuid4().hex
        others = [
            (other, number) for other, number in self._session.get(SESSION_CHECKOUT_KEYS, {}).items() if other != key
        ]
        self._session[SESSION_CHECKOUT_KEYS] = {**dict(others[-(KEYS_KEPT - 1) :]), key: None}
        if unconfirmed and email:
            self._session[SESSION_UNCONFIRMED] = {**self._session.get(SESSION_UNCONFIRMED, {}), key: email}
        return key


@contextmanager
def connection_loss_refused(during: str):
    """A lost database connection, raised as ``DatabaseUnavailable``: the request may have committed just
    before its answer was lost, so it is retried with its idempotency key. Other database errors pass."""
    try:
        yield
    except (OperationalError, InterfaceError) as exc:
        if not connection_lost(exc):
            raise
        logger.error("database connection lost during %s: %s", during, exc)
        if not connection.is_usable():
            connection.close()  # the session is saved after the view: on a new connection, not this one
        raise DatabaseUnavailable() from exc
