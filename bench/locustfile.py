"""Locust buyers for ``bench.http_load``: each POSTs one-unit orders of the hot SKU over the real API.

Every answer other than 201 is recorded as a failure named by its status and the error's ``code``,
so the report counts refusals (409 insufficient_stock, 503 lock_timeout, ...) by kind.
"""

import json
import os
import uuid

from locust import FastHttpUser, constant, task


class Buyer(FastHttpUser):
    wait_time = constant(0)

    @task
    def place_order(self):
        with self.client.post(
            "/api/orders/",
            json={
                "items": [{"sku": os.environ["BENCH_SKU"], "quantity": 1}],
                "shipping_address": json.loads(os.environ["BENCH_ADDRESS"]),
                "shipping_method": int(os.environ["BENCH_METHOD"]),
            },
            headers={
                "Authorization": f"Token {os.environ['BENCH_TOKEN']}",
                "Idempotency-Key": uuid.uuid4().hex,
            },
            name="POST /api/orders/",
            catch_response=True,
        ) as response:
            if response.status_code == 201:
                response.success()
            else:
                try:
                    code = response.json().get("code", "-")
                except ValueError:
                    code = "not-json"
                response.failure(f"{response.status_code} {code}")
