"""The crowd: every buyer of a drop as a browser acts, in one asyncio process with aiohttp.

One process and one connection pool for thousands of buyers, so the load costs the machine little CPU
beside the shop it measures. Each buyer arrives at its planned time and asks again as a person would:
after a timeout or a dropped connection, and after a 503 or 429 once its Retry-After has passed.

    python -m bench.drop.crowd PLAN.json OUT.json

The plan (``bench.drop.shop``) says the scenario: with a ``drop``, its line (join, wait as told, check
out if admitted); without, the order placed directly at ``order_path``; or ``paced`` (one kind of
request at a fixed rate, for the CPU per request); and optionally a catalog side load (``GET /``).
"""

import asyncio
import json
import sys
import time
from collections import Counter
from dataclasses import dataclass

import aiohttp

from payments.providers.stripe import webhook_sign

REQUEST_TIMEOUT = 30  # seconds a buyer waits for one answer before it counts a timeout and asks again
RETRY_PAUSE = 1.0  # seconds before asking again after a timeout or a dropped connection
CONNECTIONS = 512  # the crowd's pool, as a proxy's to its upstream: more would only queue in gunicorn
# Idle connections closed before gunicorn's keep-alive (2 s) closes them, so none is reused as it is closed.
KEEPALIVE = 1.5
STREAM_SILENT_AT_MOST = 30  # seconds a stream may say nothing: twice the push process's heartbeat
NEWS_MAX_AGE = 1.0  # the news answer's Cache-Control max-age: how long a shared cache may serve it


@dataclass(frozen=True)
class Answer:
    status: int
    body: dict
    retry: float | None  # Retry-After, seconds


def percentiles(values: list[float]) -> dict:
    """p50, p99 and max of ``values`` (nearest rank), rounded; zeros when there are none."""
    ordered = sorted(values)
    if not ordered:
        return {"p50": 0.0, "p99": 0.0, "max": 0.0}
    rank = lambda q: ordered[min(len(ordered) - 1, max(0, int(len(ordered) * q + 0.5) - 1))]  # noqa: E731
    return {"p50": round(rank(0.5), 3), "p99": round(rank(0.99), 3), "max": round(ordered[-1], 3)}


class Crowd:
    def __init__(self, plan: dict, http: aiohttp.ClientSession, cache: aiohttp.ClientSession, streams=None):
        self.plan, self.http, self.cache, self.url = plan, http, cache, plan["url"]
        self.streams = streams  # a session without a connection limit: each open stream is a connection
        self.stop = plan["start_at"] + plan["deadline"]
        self.latencies: dict[str, list[float]] = {}
        self.statuses: dict[str, Counter] = {}
        self.timeouts, self.dropped = Counter(), Counter()
        self.news, self.news_fresh_until = None, 0.0
        self.shipped = {"shipping_address": plan["address"], "shipping_method": plan["method"]}

    async def send(self, kind: str, method: str, path: str, *, via=None, at=None, **request) -> Answer | None:
        """One request (``via`` a session other than the crowd's pool; ``at`` a server other than gunicorn);
        None when it timed out or its connection failed (both counted per kind)."""
        started = time.time()
        try:
            async with (via or self.http).request(method, (at or self.url) + path, **request) as response:
                raw = await response.read()
                status, retry = response.status, response.headers.get("Retry-After")
        except TimeoutError:
            self.timeouts[kind] += 1
            return None
        except aiohttp.ClientError as error:
            self.dropped[f"{kind}: {type(error).__name__}"] += 1
            return None
        self.latencies.setdefault(kind, []).append((time.time() - started) * 1000)
        self.statuses.setdefault(kind, Counter())[status] += 1
        try:
            body = json.loads(raw) if raw[:1] in (b"{", b"[") else {}
        except ValueError:
            body = {}
        return Answer(status, body if isinstance(body, dict) else {}, float(retry) if retry else None)

    async def until(self, kind: str, method: str, path: str, **request) -> Answer | None:
        """The request asked again until it gets an answer other than busy, or the run's end (None)."""
        while time.time() < self.stop:
            answer = await self.send(kind, method, path, **request)
            if answer is None:
                await asyncio.sleep(RETRY_PAUSE)
            elif answer.status in (429, 503):
                await asyncio.sleep(answer.retry or RETRY_PAUSE)
            else:
                return answer
        return None

    @staticmethod
    def final(record: dict, answer: str) -> None:
        record["final"], record["final_at"] = answer, time.time()

    @staticmethod
    def told_sold_out(record: dict) -> None:
        record["sold_out_at"] = record["sold_out_at"] or time.time()

    async def buyer(self, buyer: dict, record: dict) -> None:
        await asyncio.sleep(max(0.0, self.plan["start_at"] + buyer["arrival"] - time.time()))
        record["sent_at"] = time.time()
        if self.plan["drop"]:
            await self.line_buyer(buyer, record)
        else:
            await self.order_buyer(buyer, record)

    async def line_buyer(self, buyer: dict, record: dict) -> None:
        """Join at the push process; then wait: on its stream (``push``), or reading the place there when
        its Retry-After says and the shared news every few seconds (a change of the news reads the place
        at once, as the waiting page reloads); admitted: check out."""
        path, auth = f"/api/drops/{self.plan['drop']}/line/", {"Authorization": f"Token {buyer['token']}"}
        joining = {"headers": auth, "json": {"sku": buyer["sku"], "quantity": 1}, "at": self.plan["push_url"]}
        place = await self.until("join", "POST", path, **joining)
        if place is None:
            return
        if place.status == 409 and place.body.get("code") == "line_closed":
            return self.final(record, "closed")
        if place.status not in (200, 201):
            return self.final(record, f"join {place.status}")
        record["ticket"], record["joined_at"] = place.body["ticket"], time.time()
        passed, shown, next_news = {"X-Drop-Pass": place.body["pass_token"]}, None, time.time()
        if self.plan["push"]:
            return await self.listen(buyer, record, place.body, passed, auth)
        while True:
            state = place.body.get("state")
            if state == "sold_out":
                self.told_sold_out(record)
            if state == "admitted":
                return await self.check_out(buyer, record, place.body["order"], passed, auth)
            if state in ("refused", "closed"):
                return self.final(record, state)
            next_place, changed = time.time() + (place.retry or place.body.get("poll_seconds") or 2), False
            while not changed and time.time() < next_place:
                wake = min(next_place, next_news)
                if wake >= self.stop:
                    return
                await asyncio.sleep(max(0.0, wake - time.time()))
                if time.time() >= next_news:
                    record["news"] += 1
                    news = await self.news_read()
                    # One read in flight at a time, one every news_every at most: a slow one is not caught up.
                    next_news = max(next_news + self.plan["news_every"], time.time())
                    if news is not None and news.status == 200:
                        if news.body.get("state") == "sold_out":
                            self.told_sold_out(record)
                        seen = json.dumps([news.body.get("state"), news.body.get("variants")], sort_keys=True)
                        changed, shown = shown is not None and seen != shown, seen
            record["polls"] += 1
            place = await self.until("poll", "GET", path, headers=passed, at=self.plan["push_url"])
            if place is None or place.status != 200:
                return self.final(record, f"poll {place.status}") if place else None

    async def listen(self, buyer: dict, record: dict, place: dict, passed: dict, auth: dict) -> None:
        """Wait on the place's stream, as the waiting page's script does: its place events (admitted,
        refused; sold out, while the buyer stays in line for units that come back) and the news (sold
        out, closed). A dropped stream is opened again a second later."""
        url = f"{self.plan['push_url']}/events/drops/{self.plan['drop']}/"
        while time.time() < self.stop:
            state = place.get("state")
            if state == "sold_out":
                self.told_sold_out(record)
            if state == "admitted":
                return await self.check_out(buyer, record, place["order"], passed, auth)
            if state in ("refused", "closed"):
                return self.final(record, state)
            place = await self.stream_next(url, passed, record, known=state) or place

    async def stream_next(self, url: str, passed: dict, record: dict, *, known: str) -> dict | None:
        """Read the stream until it says something the buyer acts on, other than the ``known`` state: the
        place's (or the line's, sold out or closed, as the place's), or None if the stream ended first."""
        started, event = time.time(), "message"
        try:
            async with self.streams.get(url, headers=passed) as response:
                record["streams"] += 1
                self.latencies.setdefault("stream", []).append((time.time() - started) * 1000)
                self.statuses.setdefault("stream", Counter())[response.status] += 1
                async for raw in response.content:
                    line = raw.decode().rstrip("\n")
                    if line.startswith("event: "):
                        event = line[7:]
                    elif line.startswith("data: "):
                        data, kind, event = json.loads(line[6:]), event, "message"
                        state = data.get("state")
                        if kind == "place" and state not in ("waiting", known):
                            return data
                        if kind != "place" and state == "sold_out":
                            self.told_sold_out(record)  # it stays in line on the same stream
                        if kind != "place" and state == "closed":
                            return {"state": state}
                    if time.time() >= self.stop:
                        return None
        except TimeoutError:
            self.timeouts["stream"] += 1
        except aiohttp.ClientError as error:
            self.dropped[f"stream: {type(error).__name__}"] += 1
        await asyncio.sleep(RETRY_PAUSE)
        return None

    async def news_read(self) -> Answer | None:
        """The shared news. With ``news_shared``, one read at a time, on a connection of its own, serves
        everyone for its max-age, as a proxy or CDN in front of the shop would serve it; otherwise each
        buyer's read reaches gunicorn, as the waiting page's script asks (``cache: "no-store"``)."""
        path = f"/api/drops/{self.plan['drop']}/news/"
        if not self.plan["news_shared"]:
            return await self.send("news", "GET", path)
        if self.news is None or time.time() >= self.news_fresh_until:
            # In flight, it serves everyone who asks meanwhile; answered, it is fresh for its max-age.
            read = self.send("news", "GET", path, via=self.cache)  # the cache's own connection to the shop
            self.news, self.news_fresh_until = asyncio.ensure_future(read), float("inf")
            self.news.add_done_callback(lambda _: setattr(self, "news_fresh_until", time.time() + NEWS_MAX_AGE))
        return await asyncio.shield(self.news)

    async def check_out(self, buyer: dict, record: dict, number: str, passed: dict, auth: dict) -> None:
        record["admitted_at"], record["order"] = time.time(), number
        if buyer["abandon"]:
            return self.final(record, "abandoned")
        done = await self.until(
            "checkout", "POST", f"/api/orders/{number}/checkout/", headers=passed, json=self.shipped
        )
        if done is None or done.status != 200:
            return self.final(record, f"checkout {done.status}") if done else None
        await self.pay(record, number, auth)

    async def order_buyer(self, buyer: dict, record: dict) -> None:
        """Place the order directly, with an Idempotency-Key: 201 pays it, 409 insufficient_stock is sold out."""
        headers = {"Authorization": f"Token {buyer['token']}", "Idempotency-Key": f"drop-{buyer['i']}"}
        body = {"items": [{"sku": buyer["sku"], "quantity": 1}]} | self.shipped
        placed = await self.until("order", "POST", self.plan["order_path"], headers=headers, json=body)
        if placed is None:
            return
        if placed.status == 409 and placed.body.get("code") == "insufficient_stock":
            return self.final(record, "sold_out")
        if placed.status != 201:
            return self.final(record, f"order {placed.status} {placed.body.get('code', '')}".strip())
        record["admitted_at"], record["order"] = time.time(), placed.body["number"]
        if buyer["abandon"]:
            return self.final(record, "abandoned")
        await self.pay(record, placed.body["number"], {"Authorization": headers["Authorization"]})

    async def pay(self, record: dict, number: str, auth: dict) -> None:
        """Start paying, then the provider's signed webhook that the payment succeeded (the fake Stripe's)."""
        payment = await self.until("pay", "POST", f"/api/orders/{number}/pay/", headers=auth)
        if payment is None or payment.status != 200:
            return self.final(record, f"pay {payment.status}") if payment else None
        session = {
            "object": "checkout.session",
            "id": payment.body["reference"],
            "payment_status": "paid",
            "payment_intent": f"pi_{number}",
            "amount_total": round(float(payment.body["amount"]) * 100),
            "currency": self.plan["currency"].lower(),
        }
        event = {"id": f"evt_{number}", "object": "event", "type": "checkout.session.completed"}
        payload = json.dumps(event | {"data": {"object": session}}).encode()
        headers = {"Stripe-Signature": webhook_sign(payload, secret=self.plan["webhook_secret"])}
        headers["Content-Type"] = "application/json"
        hook = await self.until("webhook", "POST", "/payments/stripe/webhook/", headers=headers, data=payload)
        if hook is not None:
            self.final(record, "paid" if hook.status == 200 else f"webhook {hook.status}")

    async def paced(self, requests: list[dict], rate: float) -> list[dict]:
        """``requests`` sent at ``rate`` a second, each once, whatever the ones before answered: their bodies."""

        async def one(n: int, request: dict) -> dict:
            await asyncio.sleep(max(0.0, self.plan["start_at"] + n / rate - time.time()))
            answer = await self.send(self.plan["kind"], request.pop("method"), request.pop("path"), **request)
            return answer.body if answer else {}

        return await asyncio.gather(*(one(n, request) for n, request in enumerate(requests)))


async def catalog_load(url: str, *, start_at: float, seconds: float, rate: float) -> list[list[float]]:
    """GET / at a fixed rate from its own small pool (a visitor browsing): [seconds in, ms, status] each."""
    out = []
    connector = aiohttp.TCPConnector(keepalive_timeout=KEEPALIVE)
    async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)) as http:

        async def one(at: float) -> None:
            await asyncio.sleep(max(0.0, start_at + at - time.time()))
            sent = time.time()
            try:
                async with http.get(url + "/") as response:
                    await response.read()
                    out.append([round(at, 3), round((time.time() - sent) * 1000, 1), response.status])
            except (TimeoutError, aiohttp.ClientError):
                out.append([round(at, 3), REQUEST_TIMEOUT * 1000.0, 0])

        await asyncio.gather(*(one(n / rate) for n in range(int(seconds * rate))))
    return out


async def run(plan: dict) -> dict:
    connector = aiohttp.TCPConnector(limit=CONNECTIONS, limit_per_host=CONNECTIONS, keepalive_timeout=KEEPALIVE)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)
    # A stream is idle but for the push process's heartbeat: only a silence longer than that is a timeout.
    listening = aiohttp.ClientTimeout(total=None, connect=REQUEST_TIMEOUT, sock_read=STREAM_SILENT_AT_MOST)
    async with (
        aiohttp.ClientSession(connector=connector, timeout=timeout) as http,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1, keepalive_timeout=KEEPALIVE)) as cache,
        aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0), timeout=listening) as streams,
    ):
        crowd = Crowd(plan, http, cache, streams)
        side = plan.get("catalog")
        catalog = (
            asyncio.ensure_future(catalog_load(plan["url"], start_at=plan["start_at"], **side))
            if side
            else asyncio.sleep(0, [])
        )
        out = {}
        if plan["scenario"] == "paced":
            out["bodies"] = await crowd.paced(plan["requests"], plan["rate"])
        else:
            records = [
                {"i": b["i"], "final": "", "final_at": 0.0, "sold_out_at": 0.0, "news": 0, "polls": 0, "streams": 0}
                for b in plan["buyers"]
            ]
            await asyncio.gather(*(crowd.buyer(b, r) for b, r in zip(plan["buyers"], records, strict=True)))
            out["buyers"] = records
        out["catalog"] = await catalog
    kinds = {
        kind: {"count": len(ms), "statuses": dict(crowd.statuses[kind])} | percentiles(ms)
        for kind, ms in crowd.latencies.items()
    }
    return out | {
        "kinds": kinds,
        "timeouts": dict(crowd.timeouts),
        "dropped": dict(crowd.dropped),
        "ended_at": time.time(),
        "cpu_seconds": time.process_time(),
    }


def main() -> None:
    plan_path, out_path = sys.argv[1:3]
    with open(plan_path) as plan_file:
        plan = json.load(plan_file)
    result = asyncio.run(run(plan))
    with open(out_path, "w") as out_file:
        json.dump(result, out_file)


if __name__ == "__main__":
    main()
