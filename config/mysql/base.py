"""Django's MySQL backend, minus the two round trips of bookkeeping each atomic block costs.

Django runs an atomic block as ``SET autocommit=0``, its statements, ``COMMIT``, ``SET autocommit=1``.
Here turning autocommit back on waits until the connection next sends a statement: if that is the
start of another atomic block, neither switch is sent (mysqlclient skips a switch to the state the
server is already in). A hot SKU's lock holder runs batch after batch with no SQL in between, and
each of its round trips is one every queued buyer waits for (bench/reserve.py). Anything sent
outside a transaction still runs in autocommit: the switch goes first, on the same connection.
Nothing is left uncommitted by the wait: Django commits or rolls back before it turns autocommit
on (its contract for ``set_autocommit``), so the switch has no open transaction to commit.

It also lets ``core.db.statements_run`` send several statements in one round trip
(mysqlclient's MULTI_STATEMENTS flag). Only that helper sends more than one, with every value passed
as a parameter, as all of Django's SQL is: the flag adds nothing an injection could use unless a
value were pasted into SQL, which nothing here does.
"""

from django.db.backends.mysql import base, features
from MySQLdb.connections import Connection
from MySQLdb.constants import CLIENT


class LazyAutocommitConnection(Connection):
    """mysqlclient's connection; ``autocommit(True)`` is sent just before the next statement."""

    _autocommit_deferred = False

    def autocommit(self, on):
        self._autocommit_deferred = bool(on)
        if not on:
            super().autocommit(False)

    def get_autocommit(self):
        return self._autocommit_deferred or super().get_autocommit()

    def query(self, query):
        if self._autocommit_deferred:
            self._autocommit_deferred = False
            super().autocommit(True)
        super().query(query)


class DatabaseFeatures(features.DatabaseFeatures):
    can_send_statements_together = True  # see core.db.statements_run


class DatabaseWrapper(base.DatabaseWrapper):
    features_class = DatabaseFeatures

    def get_connection_params(self):
        params = super().get_connection_params()
        params["client_flag"] = params.get("client_flag", 0) | CLIENT.MULTI_STATEMENTS
        return params

    def get_new_connection(self, conn_params):
        connection = LazyAutocommitConnection(**conn_params)
        if connection.encoders.get(bytes) is bytes:  # as Django's own get_new_connection does
            connection.encoders.pop(bytes)
        return connection
