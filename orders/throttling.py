"""The order budget, shared by the API and the checkout page."""

import hashlib

from core.emails import email_canonical
from core.throttling import CountingThrottle


class OrderThrottle(CountingThrottle):
    """Orders placed per customer (a guest: per email) and per client address, in ``ORDER_THROTTLE_RATE``.

    Every attempt to place counts, whether it places, replays or is refused: a script cannot take a sale
    faster by respelling a guest email or by switching between the API and the web checkout.
    """

    scope = "order"
    rate_setting = "ORDER_THROTTLE_RATE"

    def __init__(self, request, *, email: str = ""):
        # The address as the throttle counts it; orders keep it (a guest's unpaid orders are capped per address).
        self.client_address = (self.get_ident(request) or "")[:100]
        idents = [f"ip:{self.client_address}"]
        if request.user.is_authenticated:
            idents.append(f"customer:{request.user.pk}")
        elif email:
            idents.append("email:" + hashlib.sha256(email_canonical(email).encode()).hexdigest())
        super().__init__(idents)
