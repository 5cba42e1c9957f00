"""After-sales services: shipping a paid order's units, and the buyer's returns (refunded through ``payments``).

Callers import from here.
"""

from fulfilment.services.returns import return_request_accept, return_request_create, return_request_refuse
from fulfilment.services.shipments import Tracking, order_ship

__all__ = ["Tracking", "order_ship", "return_request_accept", "return_request_create", "return_request_refuse"]
