"""The history's buyers: customers, made unless they exist, and guests, each with the row text of the
orders it places."""

import json
from datetime import timedelta
from typing import NamedTuple

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.hashers import make_password
from django.utils import timezone

from core.emails import email_canonical
from demo.history.catalog import Catalog
from demo.history.text import HISTORY_DAYS, field_text

CUSTOMER_PREFIX = "history-customer-"  # its customers' usernames
ORDERS_PER_CUSTOMER = 5_000
# A buyer's newest order ends the buyer's range in the orders' indexes by buyer, customer and client
# address, so the load keeps a page per buyer in the server's memory: a few thousand buyers at most, and
# fewer client addresses.
MAX_CUSTOMERS = 2_000
CLIENT_ADDRESSES = 250  # 10.0.0.1 on


def buyers_seed(orders: int) -> tuple[list[tuple[int, str]], list[str]]:
    """The customers, made unless they exist, as (id, email), and as many guests' emails: one customer for
    ``ORDERS_PER_CUSTOMER`` orders, from 100 to ``MAX_CUSTOMERS``."""
    count = min(max(orders // ORDERS_PER_CUSTOMER, 100), MAX_CUSTOMERS)
    names = [f"{CUSTOMER_PREFIX}{n:05d}" for n in range(1, count + 1)]
    user_model = get_user_model()
    existing = set(user_model.objects.filter(username__startswith=CUSTOMER_PREFIX).values_list("username", flat=True))
    joined = timezone.now() - timedelta(days=HISTORY_DAYS + 1)
    user_model.objects.bulk_create(
        [
            user_model(username=name, email=f"{name}@example.com", password=make_password(None), date_joined=joined)
            for name in names
            if name not in existing
        ],
        batch_size=5000,
    )
    customers = list(user_model.objects.filter(username__in=names).order_by("pk").values_list("pk", "email"))
    return customers, [f"history-guest-{n:05d}@example.com" for n in range(1, count + 1)]


class Buyer(NamedTuple):
    """Who places an order, as row text."""

    order_text: str  # the order's customer_id, email, buyer, client_address, idempotency_scope
    shipping_text: str  # its shipping_address, shipping_method_id, shipping_method_name, shipping_tax_rate
    email: str


def buyer_texts(customers: list[tuple[int, str]], guests: list[str], *, catalog: Catalog) -> list[Buyer]:
    """The buyers, customers first, then guests; each ships to an address of its own in the shop's country."""
    who = [(pk, email, f"user:{pk}", f"user:{pk}") for pk, email in customers]
    who += [(None, email, f"email:{email_canonical(email)}", f"email:{email}") for email in guests]
    method, texts = catalog.method, []
    for n, (pk, email, buyer, scope) in enumerate(who):
        address = {
            "full_name": f"History buyer {n + 1}",
            "line1": f"{n % 200 + 1} Market Street",
            "city": "Springfield",
            "postal_code": f"{10000 + n % 90000}",
            "country": settings.SHOP_COUNTRY,
        }
        client = f"10.0.0.{n % CLIENT_ADDRESSES + 1}"
        shipping = [json.dumps(address), method.id, method.name, catalog.shipping_rate]
        texts.append(
            Buyer(
                order_text="\t".join(map(field_text, [pk, email, buyer, client, scope])),
                shipping_text="\t".join(map(field_text, shipping)),
                email=field_text(email),
            )
        )
    return texts
