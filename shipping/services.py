"""A customer's address book: addresses kept for checkout, with a default for shipping and one for billing."""

from django.contrib.auth import get_user_model
from django.db import transaction

from core.errors import InvalidInput
from shipping.addresses import address_clean
from shipping.models import AddressBookEntry

# Most entries one customer keeps: a book, not a store of every address ever typed.
ADDRESS_BOOK_MAX_ENTRIES = 50


def address_book_add(*, user, address: dict, default_shipping: bool = False, default_billing: bool = False):
    """Keep ``address`` (checked by ``address_clean``: ``InvalidInput`` names what is wrong) in the user's
    book. The first entry is the default for both; ``InvalidInput`` once the book is full."""
    address = address_clean(address)
    with transaction.atomic():
        _book_lock(user_id=user.pk)
        count = AddressBookEntry.objects.filter(user=user).count()
        if count >= ADDRESS_BOOK_MAX_ENTRIES:
            raise InvalidInput(fields={"": f"An address book keeps at most {ADDRESS_BOOK_MAX_ENTRIES} addresses."})
        entry = AddressBookEntry.objects.create(user=user, address=address)
        _defaults_set(entry, shipping=default_shipping or count == 0, billing=default_billing or count == 0)
    entry.refresh_from_db()
    return entry


def address_book_update(
    *,
    entry: AddressBookEntry,
    address: dict | None = None,
    default_shipping: bool = False,
    default_billing: bool = False,
) -> AddressBookEntry:
    """Change an entry's address (checked), and make it a default; a default is never unset, only moved."""
    cleaned = address_clean(address) if address is not None else None
    with transaction.atomic():
        _book_lock(user_id=entry.user_id)
        if cleaned is not None:
            AddressBookEntry.objects.filter(pk=entry.pk).update(address=cleaned)
        _defaults_set(entry, shipping=default_shipping, billing=default_billing)
    entry.refresh_from_db()
    return entry


def address_book_remove(*, entry: AddressBookEntry) -> None:
    """Delete an entry; a default it was moves to the oldest entry left."""
    with transaction.atomic():
        _book_lock(user_id=entry.user_id)
        AddressBookEntry.all_objects.filter(pk=entry.pk).hard_delete()
        left = AddressBookEntry.objects.filter(user_id=entry.user_id).order_by("pk").first()
        if left is not None:
            _defaults_set(
                left,
                shipping=not AddressBookEntry.objects.filter(user_id=entry.user_id, is_default_shipping=True).exists(),
                billing=not AddressBookEntry.objects.filter(user_id=entry.user_id, is_default_billing=True).exists(),
            )


def _book_lock(*, user_id: int) -> None:
    """Lock the user's row: every change to one book waits for the one before it.

    Locking the book's own entries is not enough: an empty book has none, so two first addresses
    added at once both counted none, both became the default and deadlocked on each other's insert.
    """
    list(get_user_model().objects.select_for_update().filter(pk=user_id).values_list("pk"))


def _defaults_set(entry: AddressBookEntry, *, shipping: bool, billing: bool) -> None:
    """Make ``entry`` the user's default for shipping and/or billing, the others no longer; the caller holds
    the book locked (``_book_lock``), so two changes never leave two defaults."""
    others = AddressBookEntry.objects.filter(user_id=entry.user_id).exclude(pk=entry.pk)
    if shipping:
        others.filter(is_default_shipping=True).update(is_default_shipping=False)
        AddressBookEntry.objects.filter(pk=entry.pk).update(is_default_shipping=True)
    if billing:
        others.filter(is_default_billing=True).update(is_default_billing=False)
        AddressBookEntry.objects.filter(pk=entry.pk).update(is_default_billing=True)
