"""``/metrics`` for Prometheus: the requests (django-prometheus), the shop's own (``core.metrics``), and
what is read from the database at each scrape.

With ``PROMETHEUS_MULTIPROC_DIR`` set (production: every process of a host shares one directory, see
docs/deploy.md) a scrape adds up the files every process there has written, so one scrape of any web
process reports the whole host, its workers and commands included. Without it, the scraped process
alone.

Only for monitoring: a staff user's session, ``Authorization: Bearer <METRICS_TOKEN>``, or a client
address in ``METRICS_ALLOWED_NETWORKS`` (the address the connection came from, never a forwarded one).
"""

import hmac
import ipaddress
import os

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from inventory.selectors import reservation_count_active
from orders.selectors import order_overdue_seconds


class DatabaseCollector:
    """Figures read from the database when scraped: the same for every process, so read once per scrape."""

    def collect(self):
        yield GaugeMetricFamily(
            "shop_reservations_active", "Reservations holding units now.", value=reservation_count_active()
        )
        yield GaugeMetricFamily(
            "shop_sweep_lag_seconds",
            "How long the oldest overdue order has waited to be released (0: none waits).",
            value=order_overdue_seconds(),
        )


@never_cache
def metrics(request):
    if not _allowed(request):
        return JsonResponse(
            {"code": "permission_denied", "detail": "Metrics are for monitoring: a token or an allowed address."},
            status=403,
        )
    registry = CollectorRegistry(auto_describe=False)
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(registry)
    else:
        registry.register(REGISTRY)
    registry.register(DatabaseCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)


def _allowed(request) -> bool:
    if request.user.is_authenticated and request.user.is_staff:
        return True
    token = settings.METRICS_TOKEN
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    if token and scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode()):
        return True
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(address in ipaddress.ip_network(network) for network in settings.METRICS_ALLOWED_NETWORKS)
