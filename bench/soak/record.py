"""What the soak records as it goes: each process's operations, journal and logged warnings; the faults done."""

import logging
import multiprocessing
import os
import sys
import time
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from django.db import connections

from bench.soak.environment import ROOT
from core.errors import DomainError

# Until when (time.monotonic(), the same clock in every process) the shop's warnings and errors are a
# fault's doing: set by the fault injector to the fault's end plus the time its effects may last.
FAULT_UNTIL = multiprocessing.get_context("fork").Value("d", 0.0, lock=False)


class Journal:
    """Lines appended to a file as they happen (one write each), so a killed process's record survives."""

    def __init__(self, path: Path):
        self.path = path
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, *fields) -> None:
        os.write(self.fd, ("\t".join(map(str, fields)) + "\n").encode())


class Tally:
    """What one process saw: operations by kind and outcome, refusals by code, surprises."""

    def __init__(self, role: str, journal: Journal | None = None):
        self.role = role
        self.journal = journal
        self.ops = Counter()
        self.refusals = Counter()
        self.unexpected = Counter()
        self.samples: dict[str, str] = {}  # the first traceback of each unexpected exception
        self.slowest: dict[str, float] = defaultdict(float)
        self.logged = Counter()
        self.logged_in_fault = Counter()  # logged while a fault or its aftermath lasted

    def run(self, kind: str, func) -> None:
        began, how = time.monotonic(), "ok"
        try:
            outcome = func()
        except DomainError as exc:
            outcome, how = exc.code, "refused"
            self.refusals[exc.code] += 1
        except Exception as exc:
            name = type(exc).__name__
            outcome, how = f"UNEXPECTED {name}", "unexpected"
            self.unexpected[name] += 1
            self.samples.setdefault(name, f"{self.role}, {kind}:\n{_where(exc)}")
            print(f"UNEXPECTED in {self.role}, {kind}: {name}: {exc}", file=sys.stderr, flush=True)
            connections.close_all()  # whatever state it left, start the next operation clean
        if outcome is None:  # nothing to act on yet
            return
        if self.journal:
            self.journal.write("op", kind, outcome, how)
        self.ops[(kind, outcome)] += 1
        self.slowest[kind] = max(self.slowest[kind], time.monotonic() - began)


def _where(exc: Exception) -> str:
    """The project's frames of an exception and its message (library frames left out)."""
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__) if "site-packages" not in frame.filename]
    text = "".join(traceback.format_list(frames) + traceback.format_exception_only(exc))
    return text.replace(f"{ROOT}/", "")


def count_logs(tally: Tally) -> None:
    """Count the warnings and errors the shop logs in this process, by logger and message template."""
    handler = logging.Handler(level=logging.WARNING)

    def emit(record):
        during_fault = time.monotonic() < FAULT_UNTIL.value
        (tally.logged_in_fault if during_fault else tally.logged).update(
            [(record.levelname, record.name, str(record.msg))]
        )

    handler.emit = emit
    logging.getLogger().addHandler(handler)


def say(started: float, message: str) -> None:
    print(f"[{(time.monotonic() - started) / 60:5.2f} min] {message}", file=sys.stderr, flush=True)


# The faults a run injects (``run.Run`` does them), as the report lists them.
@dataclass
class Fault:
    kind: str
    at: float  # seconds since the traffic started
    seconds: float  # how long it lasted
    detail: str
    injected: bool


FAULT_KINDS = {
    "redis_restart": "the soak's redis-server SIGKILLed (every lock and queued request gone), restarted empty",
    "kill_web": "a worker process (the web side: places, pays, cancels) SIGKILLed mid-traffic, a fresh one started",
    "pause_holder": "a worker holding a SKU's lock SIGSTOPped before its guarded UPDATE, past the lock's TTL",
    "kill_sweeper": "a sweeper process (the Celery worker's part) SIGKILLed, a fresh one started",
}
