"""A local fake of the Stripe endpoints the shop's provider calls, for the tests and the multi-host run.

It answers ``POST /v1/checkout/sessions`` (and their ``/expire``) and ``POST /v1/refunds`` as Stripe
does, honouring ``Idempotency-Key`` (a repeated key gets the first answer, and nothing new happens),
and records every request. Serve it with ``http.server.ThreadingHTTPServer``.
"""

import json
import secrets
from http.server import BaseHTTPRequestHandler
from urllib.parse import parse_qs


class FakeStripe(BaseHTTPRequestHandler):
    requests: list[dict] = []
    answers: dict[str, bytes] = {}  # by idempotency key

    def do_POST(self):  # noqa: N802 - http.server's name
        body = parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
        key = self.headers.get("Idempotency-Key", "")
        FakeStripe.requests.append(
            {"path": self.path, "auth": self.headers.get("Authorization"), "key": key, "body": body}
        )
        if key not in FakeStripe.answers:
            FakeStripe.answers[key] = json.dumps(self._create(self.path, body)).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Request-Id", f"req_{secrets.token_hex(6)}")
        self.end_headers()
        self.wfile.write(FakeStripe.answers[key])

    def _create(self, path: str, body: dict) -> dict:
        if path == "/v1/checkout/sessions":
            session = f"cs_test_{secrets.token_hex(8)}"
            return {"id": session, "object": "checkout.session", "url": f"https://checkout.stripe.com/c/pay/{session}"}
        if path.startswith("/v1/checkout/sessions/") and path.endswith("/expire"):
            return {"id": path.split("/")[4], "object": "checkout.session", "status": "expired"}
        if path == "/v1/refunds":
            return {"id": f"re_{secrets.token_hex(8)}", "object": "refund", "status": "succeeded"}
        return {}

    def log_message(self, *args):
        pass
