"""The shipping methods checkout offers (read by ``shipping.sql``'s statement, which a lock holder sends with its
batch's reads), and the address book."""

from decimal import Decimal

from django.db import models

from core.db import decimal_from_db
from shipping.models import AddressBookEntry, ShippingMethod
from shipping.sql import ShippingOffer


def shipping_methods_from_rows(rows) -> list[ShippingOffer]:
    """``shipping_methods_statement``'s rows as offers (amounts as the ORM reads them, countries as ISO codes)."""
    price_field, free_field = ShippingMethod._meta.get_field("price"), ShippingMethod._meta.get_field("free_above")
    offers = [ShippingOffer(*row) for row in rows]
    return [
        offer._replace(
            price=decimal_from_db(price_field, offer.price),
            free_above=decimal_from_db(free_field, offer.free_above),
            countries=frozenset(code for code in offer.countries.split(",") if code),
        )
        for offer in offers
    ]


def shipping_offers_for(
    methods: list[ShippingOffer], *, country: str, weight_grams: int, items_amount: Decimal
) -> list[ShippingOffer]:
    """The methods that take a parcel of this weight to ``country``, cheapest first, each at the price it
    costs for an order whose items come to ``items_amount`` (free at or above its ``free_above``)."""
    offers = [
        method._replace(price=Decimal(0) if method.free_above is not None and items_amount >= method.free_above
                        else method.price)
        for method in methods
        if country in method.countries
        and (method.min_weight_grams is None or weight_grams >= method.min_weight_grams)
        and (method.max_weight_grams is None or weight_grams <= method.max_weight_grams)
    ]  # fmt: skip
    return sorted(offers, key=lambda offer: (offer.price, offer.name, offer.id))


def shipping_country_served(methods: list[ShippingOffer], *, country: str) -> bool:
    """Whether any zone covers ``country`` (whatever the parcel weighs)."""
    return any(country in method.countries for method in methods)


def address_book_list(*, user) -> list[AddressBookEntry]:
    """The user's addresses, the default for shipping first."""
    return list(AddressBookEntry.objects.filter(user=user))


def address_book_get(*, user, pk) -> AddressBookEntry | None:
    """One of the user's entries; another user's is as good as missing."""
    return AddressBookEntry.objects.filter(user=user, pk=pk).first()


def address_book_defaults(*, user) -> tuple[dict | None, dict | None]:
    """The user's default shipping and billing addresses (None where they keep none)."""
    shipping = billing = None
    for entry in AddressBookEntry.objects.filter(user=user).filter(
        models.Q(is_default_shipping=True) | models.Q(is_default_billing=True)
    ):
        if entry.is_default_shipping:
            shipping = entry.address
        if entry.is_default_billing:
            billing = entry.address
    return shipping, billing
