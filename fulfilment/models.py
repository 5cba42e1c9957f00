"""Shipments of paid orders' units, and buyers' requests to return shipped units.

The tables kept their rows when these models moved here from ``orders`` (``orders`` migration 0018).
"""

from django.conf import settings
from django.db import models
from django.db.models import Q

from core.models import BaseModel
from orders.models import Order, OrderLine, OrderLineUnits, order_line_units_constraints
from payments.models import Refund

# What staff and buyers may write, as every model, form and serializer of them limits it.
CARRIER_MAX_LENGTH = 100
TRACKING_NUMBER_MAX_LENGTH = 100
TRACKING_URL_MAX_LENGTH = 500
RETURN_WORDS_MAX_LENGTH = 1000  # a buyer's reason, staff's answer


class Shipment(BaseModel):
    """Units of a paid order's lines sent together, with the carrier and tracking number staff gave."""

    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="shipments")
    carrier = models.CharField(max_length=CARRIER_MAX_LENGTH)
    tracking_number = models.CharField(max_length=TRACKING_NUMBER_MAX_LENGTH, blank=True)
    tracking_url = models.URLField(max_length=TRACKING_URL_MAX_LENGTH, blank=True)
    shipped_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    # When its email went to the buyer (claimed before sending: ``fulfilment.emails``).
    emailed_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta(BaseModel.Meta):
        ordering = ["id"]

    def __str__(self):
        return f"{self.carrier} {self.tracking_number}".strip()


class ShipmentLine(OrderLineUnits):
    shipment = models.ForeignKey(Shipment, on_delete=models.PROTECT, related_name="lines")
    order_line = models.ForeignKey(OrderLine, on_delete=models.PROTECT, related_name="shipment_lines")

    class Meta(OrderLineUnits.Meta):
        constraints = order_line_units_constraints(parent="shipment", name="shipment_line")


class ReturnRequest(BaseModel):
    """A buyer's request to send back units of a shipped order; staff accept it (the units are refunded and
    restocked) or refuse it (``fulfilment.services.returns``). Each step is emailed to the buyer."""

    class State(models.TextChoices):
        REQUESTED = "requested", "Requested"
        ACCEPTED = "accepted", "Accepted: refunded"
        REFUSED = "refused", "Refused"

    order = models.ForeignKey(Order, on_delete=models.PROTECT, related_name="returns")
    state = models.CharField(max_length=20, choices=State.choices, default=State.REQUESTED, db_index=True)
    reason = models.TextField(max_length=RETURN_WORDS_MAX_LENGTH, blank=True)  # the buyer's words
    answer = models.TextField(max_length=RETURN_WORDS_MAX_LENGTH, blank=True)  # staff's words, when they decide
    decided_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    refund = models.OneToOneField(
        Refund, null=True, blank=True, on_delete=models.PROTECT, related_name="return_request"
    )
    # The last state the buyer was emailed about (claimed before sending: ``fulfilment.emails``).
    emailed_state = models.CharField(max_length=20, blank=True, editable=False)

    class Meta(BaseModel.Meta):
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(
                condition=~Q(state="accepted") | Q(refund__isnull=False), name="return_accepted_has_refund"
            ),
        ]

    def __str__(self):
        return f"Return #{self.pk} for order {self.order} ({self.state})"


class ReturnLine(OrderLineUnits):
    return_request = models.ForeignKey(ReturnRequest, on_delete=models.PROTECT, related_name="lines")
    order_line = models.ForeignKey(OrderLine, on_delete=models.PROTECT, related_name="return_lines")

    class Meta(OrderLineUnits.Meta):
        constraints = order_line_units_constraints(parent="return_request", name="return_line")
