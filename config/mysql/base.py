"""Django's MySQL backend, minus the two round trips of bookkeeping each atomic block costs.

Django runs an atomic block as ``SET autocommit=0``, its statements, ``COMMIT``, ``SET autocommit=1``.
Here turning autocommit back on waits until the connection next sends a statement: if that is the
start of another atomic block, neither switch is sent (mysqlclient skips a switch to the state the
server is already in). A hot SKU's lock holder runs batch after batch with no SQL in between, and
each of its round trips is one every queued buyer waits for (bench/reserve.py). Anything sent
outside a transaction still runs in autocommit: the switch goes first, on the same connection.
Nothing is left uncommitted by the wait: Django commits or rolls back before it turns autocommit
on (its contract for ``set_autocommit``), so the switch has no open transaction to commit.
"""

from django.db.backends.mysql import base
from MySQLdb.connections import Connection


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


class DatabaseWrapper(base.DatabaseWrapper):
    def get_new_connection(self, conn_params):
        connection = LazyAutocommitConnection(**conn_params)
        if connection.encoders.get(bytes) is bytes:  # as Django's own get_new_connection does
            connection.encoders.pop(bytes)
        return connection
