"""Pages of a list on the shop's HTML pages, numbered and refused as the API's are (``config.api``)."""

from django.core.paginator import EmptyPage, Page, Paginator
from django.http import Http404

from core.numbers import PAGE_MAX, NumberInvalid, number_whole


def page_or_404(object_list, *, per_page: int, number: str | None) -> Page:
    """Page ``number`` of ``object_list`` (page 1 when none is asked for). A number that is not a page
    number (read as ``core.numbers`` reads every number), or one past the last page, is a 404: a stale
    link says the page is gone, as the API does, rather than quietly showing another page."""
    try:
        return Paginator(object_list, per_page).page(
            1 if number is None else number_whole(number, low=1, high=PAGE_MAX)
        )
    except (NumberInvalid, EmptyPage):
        raise Http404("No such page.") from None
