"""The settings of the gunicorn ``bench.http_wrk`` starts: the shop's own, with ``bench.http_urls`` as the URLconf.

So the baseline views are served by the same server, middleware and settings as ``POST /api/orders/``,
and the shop itself never routes them.
"""

from config.settings import *  # noqa: F403

ROOT_URLCONF = "bench.http_urls"
