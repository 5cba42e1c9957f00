"""Health endpoints for load balancers and orchestrators.

``/healthz`` says the process answers and touches no dependency, so a busy or failing database never
gets a live process restarted. ``/readyz`` is django-health-check's view over what serving orders
needs: the database answers, every migration is applied (a host started before ``migrate`` ran is
not ready) and, unless the shop sells through a Redis outage (``LOCK_DB_FALLBACK``), the lock
service's Redis takes a write and gives it back. 200 when all pass, else 500 naming the failing
check; ``?format=json`` or ``Accept: application/json`` for machines.

Anyone may ask, so a failure names the check and nothing more: the database driver's message carries
its host and user. The detail is in the log (django-health-check logs each failure with its traceback).
"""

import dataclasses

from django.conf import settings
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpResponse
from django.views.decorators.cache import never_cache
from health_check import checks
from health_check.base import HealthCheck
from health_check.exceptions import ServiceUnavailable
from health_check.views import HealthCheckView


@never_cache
def healthz(request):
    return HttpResponse("ok\n", content_type="text/plain")


class _Untold:
    """A check whose failure says only that it failed: the detail is the log's."""

    async def get_result(self, executor=None):
        result = await super().get_result(executor)
        if result.error is not None:
            result.error = type(result.error)("failed; the detail is in the server's log")
        return result


@dataclasses.dataclass
class Database(_Untold, checks.Database):
    pass


@dataclasses.dataclass
class Cache(_Untold, checks.Cache):
    pass


@dataclasses.dataclass
class MigrationsApplied(HealthCheck):
    """Every migration of the code this process runs is applied to its database."""

    def run(self):
        try:
            executor = MigrationExecutor(connection)
            pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
        finally:
            connection.close()  # the check runs in a worker thread: its connection goes with it
        if pending:
            raise ServiceUnavailable(f"{len(pending)} migration(s) not applied")


_ready_on_redis = HealthCheckView.as_view(checks=[Database, (Cache, {"alias": "locks"}), MigrationsApplied])
_ready_without_redis = HealthCheckView.as_view(checks=[Database, MigrationsApplied])


async def readyz(request):
    """Ready to sell. With ``LOCK_DB_FALLBACK`` on (the default) a host sells through a Redis outage under
    the stock rows' locks, so Redis is not needed to be ready: taking every host out of the load balancer
    when Redis fails would close the shop that the fallback keeps open. Off, Redis is checked too."""
    return await (_ready_without_redis if settings.LOCK_DB_FALLBACK else _ready_on_redis)(request)
