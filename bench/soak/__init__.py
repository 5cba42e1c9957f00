"""Soak: minutes of mixed traffic from several processes while the books are checked every few seconds.

    python -m bench.soak [--minutes 10] [--workers 6] [--skus 60]    (bin/soak sets the defaults up)

Not a CI test: it finds what only shows after thousands of interleavings. Worker processes place
orders (1 to 3 SKUs, a few hot SKUs and many cold ones, now and then a quantity that must be
refused), replay Idempotency-Keys, pay (some cards declined), fail payments, cancel, expire, and
adjust stock as staff, all through the real services. Sweeper processes run the expiry and
failed-payment sweeps and the payment sweep (what Celery beat runs; no Celery worker runs here, so
the sweep is also what releases failed payments). A checker process reads the books in one snapshot
every few seconds. Meanwhile faults are injected, each kind ``--fault-rounds`` times: the soak's Redis
server is killed and restarted (every lock gone), a worker process is SIGKILLed, a sweeper is
SIGKILLed (each replaced by a fresh one), and a worker holding a SKU's lock is SIGSTOPped past the
lock's TTL, then resumed. At the end the workers stop, the last reservations expire and are swept,
and a final check must find every order settled and nothing reserved. The report goes to
docs/soak.md; the exit status is 1 on any drift, oversell, mismatch, unexpected exception or fault
that could not be injected.

Oversell is counted twice against the units put in (restock and adjustment ledger rows): from the
rows (active and committed reservations, every check) and from the answers (units of the orders
callers were told are paid, at the end). Neither is bounded by the CHECK on the counters.

Workers journal what they were told (and what they had in flight) to a file as they go, so a killed
worker's answers still count.

It runs in a database of its own (``<DATABASE_URL name>_soak``, dropped and migrated afresh) and a
redis-server of its own, started on a free port and restarted by the faults, with lock keys under
``soak``.

The modules, in the order a run uses them: ``environment`` (the arguments, and the soak's database and
Redis, set before Django starts), ``run`` (the catalog, the processes and the faults done to them, the
wind-down), ``traffic`` (the workers), ``sweeps``, ``books`` (the book checks), ``record`` (what each
process saw and the faults done) and ``report`` (docs/soak.md); ``__main__`` runs them.
``books.books_check`` can be called from ``manage.py shell`` on a soak database left behind.
"""
