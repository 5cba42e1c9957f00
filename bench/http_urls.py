"""The shop's URLs and the HTTP baselines of ``bench.http_wrk`` beside them (``bench.http_settings`` routes here)."""

from django.urls import path

from bench import http_views
from config.urls import handler400, handler403, handler404, handler500
from config.urls import urlpatterns as shop_urlpatterns

urlpatterns = [
    path("bench/floor/drf/", http_views.FloorApi.as_view(), name="bench-floor-drf"),
    path("bench/floor/bare/", http_views.floor_bare, name="bench-floor-bare"),
    path("bench/checkout/", http_views.CheckoutPlainApi.as_view(), name="bench-checkout"),
    *shop_urlpatterns,
]

__all__ = ["handler400", "handler403", "handler404", "handler500", "urlpatterns"]
