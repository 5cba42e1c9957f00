"""Pages of a list on the shop's HTML pages, numbered and refused as the API's are (``config.api``)."""

import re

from django.core.paginator import EmptyPage, Page, Paginator
from django.http import Http404

PAGE_NUMBER = re.compile(r"[1-9][0-9]{0,8}")  # ASCII digits, bounded: no 5,000-digit int() to parse


def page_or_404(object_list, *, per_page: int, number: str | None) -> Page:
    """Page ``number`` of ``object_list`` (page 1 when none is asked for). A number that is not a page
    number, or is past the last page, is a 404: a stale link says the page is gone, as the API does,
    rather than quietly showing another page."""
    if number is None:
        number = "1"
    if not PAGE_NUMBER.fullmatch(number):
        raise Http404("No such page.")
    try:
        return Paginator(object_list, per_page).page(int(number))
    except EmptyPage:
        raise Http404("No such page.") from None
