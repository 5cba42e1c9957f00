"""An order's link for emails: its page's address with a signed key, so the buyer's mail opens it anywhere."""

from django.conf import settings
from django.core import signing
from django.urls import reverse

from orders.errors import OrderLinkExpired
from orders.models import Order

ORDER_LINK_SALT = "orders.order-link"


def order_link(order: Order) -> str:
    """The order page's address, with a signed key (it carries when it was signed) that lets any browser see
    the order for ``ORDER_LINK_MAX_AGE_SECONDS``; paying or cancelling still needs the buyer's browser or
    account (``orders.views``)."""
    key = signing.dumps(order.number, salt=ORDER_LINK_SALT)
    return f"{settings.SHOP_URL.rstrip('/')}{reverse('order-detail', args=[order.number])}?key={key}"


def order_link_check(*, number: str, key: str) -> bool:
    """Whether ``key`` is the signed key of the order ``number``'s link; ``OrderLinkExpired`` if it was, once."""
    try:
        return signing.loads(key, salt=ORDER_LINK_SALT, max_age=settings.ORDER_LINK_MAX_AGE_SECONDS) == number
    except signing.SignatureExpired:
        raise OrderLinkExpired() from None
    except signing.BadSignature:
        return False
