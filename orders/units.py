"""An order line's units, counted in one place: what is left to ship, to return and to refund, and what a
restock may put back. Fulfilment, refunds, returns, the pages, the admin, the API and ``reconcile`` read them
from here (``OrderLine.units``).

A line keeps four counts: units ordered, shipped (sent in shipments), refunded (by refunds made or under
way) and returned (shipped units that came back with an accepted return, refunded with it). A refund that is
not a return takes units not yet shipped first: those are cancelled, never sent, still on the shelf. Only
once none is left to ship does it refund units the customer has and keeps. So of the refunded units that
did not come back, as many as were never shipped are cancelled and the rest are kept.

The rule: a unit is shipped at most once (shipped + cancelled <= ordered), returned only if it was shipped
and neither returned nor refunded before, refunded at most once (refunded <= ordered); a restock puts back
only units returned or cancelled.
"""

from dataclasses import dataclass

REFUND_RESTOCK = "refund_restock"  # the ledger reason of units a refund puts back on hand, naming its line


@dataclass(frozen=True)
class LineUnits:
    ordered: int
    shipped: int
    refunded: int
    returned: int

    @property
    def cancelled(self) -> int:
        """Refunded and never shipped: on the shelf, never to be sent."""
        return max(0, min(self.refunded - self.returned, self.ordered - self.shipped))

    @property
    def kept(self) -> int:
        """Refunded while at the customer, who keeps them."""
        return max(0, self.refunded - self.returned - self.cancelled)

    @property
    def shippable(self) -> int:
        """Paid, not shipped, not refunded: what is left to send."""
        return max(0, self.ordered - self.shipped - self.cancelled)

    @property
    def returnable(self) -> int:
        """At the customer and not refunded: what may be sent back (less what open returns ask already)."""
        return max(0, self.shipped - self.returned - self.kept)

    @property
    def refundable(self) -> int:
        return max(0, self.ordered - self.refunded)

    @property
    def restockable(self) -> int:
        """The most a line's refunds may have put back on hand: units that came back or never left."""
        return self.returned + self.cancelled

    def cancels(self, units: int) -> int:
        """Of ``units`` more refunded (not returned), those never shipped: they may go back on hand."""
        return min(units, self.shippable)

    def broken(self, *, restocked: int = 0) -> list[str]:
        """How the counts, and the units its refunds put back on hand (``restocked``), break the rule; [] if not."""
        problems = [
            f"{count} {what} of {bound} {of}"
            for count, what, bound, of in [
                (self.shipped, "shipped", self.ordered, "ordered"),
                (self.refunded, "refunded", self.ordered, "ordered"),
                (self.returned, "returned", self.shipped, "shipped"),
                (self.returned, "returned", self.refunded, "refunded"),
            ]
            if count > bound
        ]
        if restocked > self.restockable:
            problems.append(f"{restocked} restocked, but {self.restockable} came back or were refunded unshipped")
        return problems
