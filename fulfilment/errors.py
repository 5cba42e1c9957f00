"""Errors of shipping and returns, each with its HTTP status and a message for the buyer or staff."""

from http import HTTPStatus

from core.errors import DomainError


class OrderNotShippable(DomainError):
    code = "order_not_shippable"
    status_code = HTTPStatus.CONFLICT
    default_detail = "Only a paid order not yet shipped in full can be shipped."


class ShipmentExceedsOrder(DomainError):
    """``lines``: per SKU asked, the units ``requested`` and those ``left`` to ship."""

    code = "shipment_exceeds_order"
    status_code = HTTPStatus.CONFLICT
    default_detail = "A shipment cannot send more of a line than is left to ship."


class ReturnNotAllowed(DomainError):
    """``lines``: per SKU asked, the units ``requested`` and those ``left`` to return (shipped, not yet
    refunded nor asked back by an open return)."""

    code = "return_not_allowed"
    status_code = HTTPStatus.CONFLICT
    default_detail = "Only units that were shipped, and not yet refunded or asked back, can be returned."


class ReturnAlreadyDecided(DomainError):
    code = "return_already_decided"
    status_code = HTTPStatus.CONFLICT
    default_detail = "This return was accepted or refused already."
