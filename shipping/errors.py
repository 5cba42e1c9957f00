"""Shipping's refusals: a country no zone covers, a method that does not go there or takes no such parcel."""

from http import HTTPStatus

from django_countries import countries

from core.errors import DomainError


class ShippingUnavailable(DomainError):
    """``country``: the ISO code of the shipping address's country, which no shipping zone covers."""

    code = "shipping_unavailable"
    status_code = HTTPStatus.CONFLICT
    default_detail = "We do not ship to this country."

    def __init__(self, *, country: str):
        super().__init__(f"We do not ship to {countries.name(country) or country}.", country=country)


class ShippingMethodUnavailable(DomainError):
    """``methods``: the ids of the methods that do go to ``country`` with this order, cheapest first."""

    code = "shipping_method_unavailable"
    status_code = HTTPStatus.CONFLICT
    default_detail = "This shipping method is not available for this address and order; choose another."
