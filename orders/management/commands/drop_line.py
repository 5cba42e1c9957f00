import logging
import time
from collections import deque

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import DatabaseError, close_old_connections

from drops import line
from drops.selectors import drop_list_running
from orders.services import drop_line_pass

logger = logging.getLogger(__name__)

RATE_WINDOW_SECONDS = 10  # the admission rate buyers are told is measured over this long


class Command(BaseCommand):
    help = (
        "Run the drops' lines: every DROP_LINE_PASS_SECONDS, for each drop whose line is on, publish its news "
        "and admit the heads of its line for the units free now (each admission a hold through the stock "
        "engine). Redis down: the lines pause, every place kept, and resume in order. Run one or more "
        "beside the web servers (bin/run starts one); two never admit one place twice."
    )

    def add_arguments(self, parser):
        parser.add_argument("--once", action="store_true", help="one pass over every drop, then stop")

    def handle(self, *args, once, **options):
        admitted: dict[int, deque] = {}
        while True:
            started = time.monotonic()
            close_old_connections()
            for drop in drop_list_running():
                times = admitted.setdefault(drop.pk, deque())
                while times and times[0][0] < started - RATE_WINDOW_SECONDS:
                    times.popleft()
                rate = sum(n for _, n in times) / RATE_WINDOW_SECONDS
                try:
                    result = drop_line_pass(drop=drop, rate_measured=rate)
                except line.LINE_DOWN as exc:
                    logger.warning("drop %s: the line is paused, Redis is unreachable: %s", drop.pk, exc)
                    continue
                except DatabaseError as exc:  # a lost connection or a deadlock: the next pass reads afresh
                    logger.warning("drop %s: pass abandoned, the database refused it: %s", drop.pk, exc)
                    continue
                if result.admitted:
                    times.append((started, result.admitted))
            if once:
                return
            time.sleep(max(0.0, settings.DROP_LINE_PASS_SECONDS - (time.monotonic() - started)))
