"""Group commit: the requests queued on a hot SKU, carried out by its lock holder in one transaction.

A kind of request that may be batched is a ``Batch`` subclass. It says what a request and its
result are, loads what its requests read (once per batch), and has a ``step``: the rules of ONE
request, which stages its rows and takes its units of stock, and raises its ``DomainError`` like
any service. ``batch_run`` calls the step for each request in queue order, undoes what a refused
request staged, and has the batch ``write`` what was staged: one guarded UPDATE per SKU and the
rows inserted together. ``stock_section_batched`` queues a request with the SKU's lock, and as
holder serves the queued ones and answers each. Only this module knows about queues, savepoints
and answers; a step sees one request and gets the answer it would get alone.
"""

import logging
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Iterable
from typing import ClassVar

from django.conf import settings
from django.db import transaction

from core.clock import db_now
from core.metrics import BATCH_SIZE, GUARD_REFUSALS
from inventory import locks, sql
from inventory.errors import DomainError, InsufficientStock, LockTimeout
from inventory.locks import wire
from inventory.rules import Demand, reservation_check
from inventory.section import stock_section

logger = logging.getLogger(__name__)


class StockPlan:
    """The units a batch's requests take, by product, staged until the batch writes them.

    With the free counts read under the lock, ``take`` refuses what they do not cover. Without them
    (``available`` None) every take is assumed covered, and the guarded UPDATE at the write decides.
    """

    def __init__(self, available: dict[int, int] | None = None):
        self.assumed = available is None
        self._left = Counter(available or {})
        self._taken: list[Demand] = []
        self.sold_out: dict[str, int] = {}  # SKUs seen with no unit left: product ids by SKU

    def left(self, variant_id: int, units: int) -> None:
        """What the guarded UPDATE left free of a product; none left marks it sold out."""
        if units <= 0:
            self.sold_out.update({want.sku: variant_id for want in self._taken if want.variant_id == variant_id})

    def take(self, demands: list[Demand]) -> None:
        """Take every demand of one request, or none: the rules of one reservation (``inventory.rules``)
        refuse it with their ``DomainError``, ``InsufficientStock`` listing each SKU the stock does not cover."""
        if not self.assumed:  # counts read under the lock: a SKU with none left is sold out, whichever rule refuses
            self.sold_out.update({want.sku: want.variant_id for want in demands if self._left[want.variant_id] <= 0})
        reservation_check(demands, left=None if self.assumed else self._left)
        for want in demands:
            self._left[want.variant_id] -= want.quantity
        self._taken.extend(demands)

    def totals(self) -> dict[int, int]:
        """Units taken by product, in product order (the order locks and rows are taken in)."""
        totals = Counter()
        for want in self._taken:
            totals[want.variant_id] += want.quantity
        return dict(sorted(totals.items()))

    def reserve(self, statements: list[tuple[str, list]] = ()) -> list | None:
        """Reserve the units taken (one guarded UPDATE per product) with ``statements`` sent first, in one
        round trip, all or nothing: what the statements returned. None if an assumed take was not
        covered (nothing was written); a refusal of counts read under the lock raises."""
        totals = self.totals()
        reserved = sql.reserved_add_if_free(quantities=totals, statements=statements)
        if reserved.refused:
            variant_id = reserved.refused[0]
            self.refused(variant_id, totals[variant_id], reserved.available[variant_id])
            return None
        for variant_id, units in reserved.available.items():
            self.left(variant_id, units)
        return reserved.results

    def refused(self, variant_id: int, quantity: int, available: int) -> bool:
        """The guarded UPDATE refused ``quantity`` units of a product: False if the take was assumed
        (the batch runs again with the counts read), else ``LockTimeout``: a rival changed the row since
        we read it (our lock was lost, or a section ran under the rows' locks in a Redis outage), so the
        whole transaction rolls back, and nothing was written. Not ``insufficient_stock``: the units the
        batch's first request asked for may well be free; its buyer retries."""
        if self.assumed:
            return False
        sku = next(want.sku for want in self._taken if want.variant_id == variant_id)
        GUARD_REFUSALS.inc()
        logger.warning(
            "the guarded UPDATE refused %s units of %s read as free (%s left): a rival changed the row",
            quantity,
            sku,
            available,
        )
        raise LockTimeout(skus=[sku])

    def _mark(self) -> int:
        return len(self._taken)

    def _undo(self, mark: int) -> None:
        for want in self._taken[mark:]:
            self._left[want.variant_id] += want.quantity
        del self._taken[mark:]


class Batch(ABC):
    """The requests of one kind that one lock holder carries out together, and what they share.

    A subclass names its ``kind``, its ``request_type`` (a msgspec Struct whose ``lines`` have a ``sku``
    and a ``quantity``: queued requests travel as typed JSON, ``inventory.locks.wire``, so it and the
    Structs it holds forbid unknown fields) and ``result_type``; its ``__init__`` reads what its steps
    need, once; ``step(request)`` applies the rules of one request and stages its rows (``stage``) and
    units (``stock.take``); ``write()`` stores what is staged and fills in the staged results (ids,
    times). ``free_more()`` may free units when the stock falls short. A batch only takes units, so a
    sold-out mark refuses its requests.
    """

    kind: ClassVar[str]
    request_type: ClassVar[type]
    result_type: ClassVar[type]

    def __init__(self, requests: list):
        self.stock = StockPlan()
        self.staged: list = []

    @abstractmethod
    def variant_ids(self) -> set[int]:
        """The products whose stock the batch's requests may take."""

    @abstractmethod
    def step(self, request):
        """The rules of one request: its result, or raise its ``DomainError``."""

    @abstractmethod
    def write(self) -> bool:
        """Store what is staged (``self.stock.reserve`` with the rows' INSERTs). False if an assumed take
        was not covered: nothing was stored."""

    def free_more(self) -> int:
        """Free units for requests the stock does not cover (before any unit is reserved); how many freed."""
        return 0

    def stage(self, item) -> None:
        """Keep ``item`` (rows to write) for ``write``; dropped if the request's step is refused."""
        self.staged.append(item)


def batch_run(batch_type: type[Batch], requests: list) -> list:
    """Per request, in queue order, its result or its ``DomainError``: the answer it would get alone.

    Runs inside the stock section of the requests' SKUs. A batch assumes the stock covers every
    request, as it does until a sell-out, so nothing is read before the guarded UPDATEs; if one
    refuses, nothing was written, and the steps run again on the counts read under the lock. A shortage then
    asks the batch to ``free_more`` (expire overdue orders, say) before anything is reserved, and the
    steps run once more, so the queue order still decides who gets the freed units.
    """
    BATCH_SIZE.labels(kind=batch_type.kind).observe(len(requests))
    batch = batch_type(requests)
    variant_ids = batch.variant_ids()
    outcomes = _steps(batch, requests, StockPlan())
    if batch.write():
        _mark_sold_out_on_commit(batch.stock)
        return outcomes
    outcomes = _steps(batch, requests, StockPlan(sql.stock_available(variant_ids=variant_ids)))
    if any(isinstance(outcome, InsufficientStock) for outcome in outcomes) and batch.free_more():
        outcomes = _steps(batch, requests, StockPlan(sql.stock_available(variant_ids=variant_ids)))
    batch.write()
    _mark_sold_out_on_commit(batch.stock)
    return outcomes


def _mark_sold_out_on_commit(stock: StockPlan) -> None:
    """Mark the SKUs the batch leaves with no unit free, once its commit is done and before the locks go.

    Known without a read: the guarded UPDATE says what it left, and a refusal on counts read under the
    lock says what was free (a batch only takes). A mark lives no longer than the SKU's first active
    reservation, whose expiry frees units; none is set while an overdue one holds units, which the
    slow path expires to sell them (``Batch.free_more``).
    """
    if not stock.sold_out or settings.SOLD_OUT_MARK_SECONDS <= 0:
        return
    first_expiry = sql.reservations_first_expiry(variant_ids=stock.sold_out.values())
    now = db_now()
    seconds = {
        sku: min(settings.SOLD_OUT_MARK_SECONDS, (first_expiry[variant_id] - now).total_seconds())
        if variant_id in first_expiry
        else settings.SOLD_OUT_MARK_SECONDS
        for sku, variant_id in stock.sold_out.items()
    }
    if marks := {sku: ttl for sku, ttl in seconds.items() if ttl > 0}:
        transaction.on_commit(lambda: locks.sold_out_mark(marks))


def _steps(batch: Batch, requests: list, stock: StockPlan) -> list:
    """Each request's step, in order; a refused request's staged rows and units are undone alone."""
    batch.stock, batch.staged = stock, []
    outcomes = []
    for request in requests:
        staged, taken = len(batch.staged), stock._mark()
        try:
            outcomes.append(batch.step(request))
        except DomainError as refusal:
            del batch.staged[staged:]
            stock._undo(taken)
            outcomes.append(refusal)
    return outcomes


# --- Queueing and answering ------------------------------------------------------------------------


def stock_section_batched(*, skus: Iterable[str], batch_type: type[Batch], request):
    """``request``'s result, carried out in the stock section of ``skus``; its refusal is raised.

    For one SKU the request queues with the SKU's lock (``locks.sku_lock_serving``): whoever holds it
    carries out every queued request of the same kind with its own in one transaction, then answers
    each. A hot SKU thus pays one lock hold and one commit per batch rather than per buyer, and
    buyers are still served in queue order. Several SKUs, or a section already held, run alone.

    A request that names a SKU marked sold out is refused before it queues (``locks.soldout``): for
    one SKU by the round trip that would queue it, or by one read of its mark if this process found
    it marked lately (the cheaper answer while a sell-out lasts); for several by the round trip that
    would lock them.
    """
    skus = sorted(set(skus))
    outcome = wire.RunAlone()
    if len(skus) == 1 and not locks.held_skus():
        if locks.sold_out_lately(skus[0]) and locks.skus_sold_out(skus):
            outcome = _sold_out_refusal(request, set(skus))
        else:
            outcome = _served_or_serve(skus[0], batch_type=batch_type, request=request)
    if isinstance(outcome, wire.RunAlone):
        try:
            with stock_section(skus=skus, takes_only=True):
                [outcome] = batch_run(batch_type, [request])
        except locks.MarkedSoldOut as marked:
            outcome = _sold_out_refusal(request, marked.skus)
    if isinstance(outcome, Exception):
        try:
            raise outcome
        finally:
            # The raised error's traceback holds this frame: without this, each refusal would leave a
            # reference cycle for the garbage collector, whose full passes stall a process that a
            # crowd of refusals keeps busy.
            del outcome
    return outcome


def _served_or_serve(sku: str, *, batch_type: type[Batch], request):
    """Our outcome: answered by the holder we queued behind, or as holder of a batch (ours first)."""
    serving = locks.sku_lock_serving(
        sku, kind=batch_type.kind, body=wire.encode(request), refuse_sold_out=settings.SOLD_OUT_MARK_SECONDS > 0
    )
    try:
        with serving as (lock, answer):
            if lock is None:
                return _served_outcome(sku, batch_type=batch_type, answer=answer)
            return _serve(lock, sku=sku, batch_type=batch_type, request=request)
    except locks.MarkedSoldOut as marked:
        return _sold_out_refusal(request, marked.skus)


def _sold_out_refusal(request, marked: set[str]) -> InsufficientStock:
    """The refusal of ``request``'s lines on SKUs marked sold out: none available."""
    return InsufficientStock(
        shortages=[
            {"sku": line.sku, "requested": line.quantity, "available": 0}
            for line in request.lines
            if line.sku in marked
        ]
    )


def _served_outcome(sku: str, *, batch_type: type[Batch], answer: bytes | None):
    """What the holder's answer says; an answer that never came, or does not fit, leaves the outcome unknown."""
    outcome = wire.Unknown()
    if answer is not None:
        try:
            outcome = wire.answer_decode(answer, batch_type.result_type)
        except wire.Malformed as exc:
            logger.error("refused a malformed answer to a %s request on %s: %s", batch_type.kind, sku, exc)
    if isinstance(outcome, wire.Unknown):
        return LockTimeout.outcome_unknown(skus=[sku])
    return outcome


def _serve(lock, *, sku: str, batch_type: type[Batch], request):
    """As holder: our request and those we took, in one transaction; every taken waiter is answered.

    Whatever fails, each waiter gets its result, ``RunAlone`` (nothing was done for it) or, once the
    commit may have happened, ``Unknown`` (look it up). A request we cannot read whole is handed back
    with ``RunAlone``, never served half: its buyer may run code that knows more than ours.
    Our own result stands once committed, whatever becomes of the answers.
    """
    kind = batch_type.kind
    answers = dict.fromkeys((waiter for waiter, _ in lock.taken), wire.RUN_ALONE_ANSWER)
    try:
        requests, waiters, unread = [request], [], []
        for waiter, body in lock.taken:
            try:
                requests.append(wire.decode(body, batch_type.request_type))
                waiters.append(waiter)
            except wire.Malformed as exc:
                unread.append(exc)  # left out of the batch: its answer stays RunAlone
        if unread:
            logger.warning(
                "handed back %d %s request(s) queued on %s that wire version %d cannot read, for their buyers to "
                "run alone (a host on other code, or a value planted in Redis): %s",
                len(unread),
                kind,
                sku,
                wire.WIRE_VERSION,
                unread[0],
            )
        executed = False
        try:
            with transaction.atomic(durable=True):
                outcomes = batch_run(batch_type, requests)
                executed = True
        except BaseException:
            if executed:  # the commit itself failed: it may have happened
                answers.update(dict.fromkeys(waiters, wire.UNKNOWN_ANSWER))
            raise
        answers.update(dict.fromkeys(waiters, wire.UNKNOWN_ANSWER))
        for waiter, outcome in zip(waiters, outcomes[1:], strict=True):
            try:
                answers[waiter] = wire.answer_encode(outcome)
            except Exception:
                logger.exception("could not encode the answer to a %s request on %s; it learns nothing", kind, sku)
        if len(requests) > 1:
            logger.debug("served %d %s requests on %s in one commit", len(requests), kind, sku)
        return outcomes[0]
    finally:
        lock.answer(answers)
