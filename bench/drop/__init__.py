"""A whole drop over HTTP on this machine: a crowd of buyers at 500 units, with the line on, off, and the
plain Django checkout, side by side (``bin/drop``; docs/drop.md says what it measures and how).

- ``crowd``: the buyers, one asyncio process (aiohttp), apart from the shop so their CPU is not the shop's.
- ``shop``: the shop under test (gunicorn on production settings, the line's runner, a Celery worker, a
  sweep of lapsed holds, a fake Stripe), its fixtures, its CPU and its books.
- ``report``: the figures, the targets met or missed, the plot.
"""
