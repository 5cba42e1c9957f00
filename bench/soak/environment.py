"""The soak's arguments, and its own database and Redis server: all set before Django starts."""

import argparse
import atexit
import os
from pathlib import Path

import environ
import MySQLdb

import bench.soak
from tests.processes import RedisServer

ROOT = Path(__file__).resolve().parents[2]
PAYMENT_SETTLE_AFTER = 20  # seconds: a killed payer's charge is settled by the payment sweep within the run


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=bench.soak.__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="traffic time; fractions are fine")
    parser.add_argument("--workers", type=int, default=6, help="traffic processes")
    parser.add_argument("--sweepers", type=int, default=2, help="sweeper processes (they share work, SKIP LOCKED)")
    parser.add_argument("--skus", type=int, default=60, help="products, of which --hot are hot")
    parser.add_argument("--hot", type=int, default=4)
    parser.add_argument("--ttl", type=int, default=10, help="RESERVATION_TTL_SECONDS for the run")
    parser.add_argument("--sweep-every", type=float, default=2.0, help="seconds between a sweeper's passes")
    parser.add_argument("--lease", type=float, default=10.0, help="SWEEP_LEASE_SECONDS for the run")
    parser.add_argument("--check-every", type=float, default=3.0, help="seconds between book checks")
    parser.add_argument("--pause", type=float, default=0.01, help="mean think time between a worker's operations")
    parser.add_argument("--fault-rounds", type=int, default=2, help="times each kind of fault is injected")
    parser.add_argument("--redis-down", type=float, default=2.0, help="seconds Redis stays down in a restart")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--report", type=Path, default=ROOT / "docs" / "soak.md")
    args = parser.parse_args()
    if args.workers < 1 or args.sweepers < 1 or not 1 <= args.hot < args.skus or args.minutes <= 0:
        parser.error("need workers >= 1, sweepers >= 1, 1 <= hot < skus and minutes > 0")
    return args


def soak_services_use(args: argparse.Namespace) -> RedisServer:
    """Before ``django.setup()``: a fresh ``<name>_soak`` database, our own Redis server (returned: the
    faults kill and restart it), run settings."""
    url = os.environ.get("DATABASE_URL", "mysql://root:@127.0.0.1:3306/shop")
    if not url.startswith("mysql"):
        raise SystemExit("The soak runs on MySQL/MariaDB: set DATABASE_URL=mysql://...")
    config = environ.Env.db_url_config(url)
    name = config["NAME"] if config["NAME"].endswith("_soak") else f"{config['NAME']}_soak"
    server = MySQLdb.connect(
        host=config["HOST"] or "127.0.0.1",
        port=int(config["PORT"] or 3306),
        user=config["USER"],
        passwd=config["PASSWORD"],
    )
    server.cursor().execute(f"DROP DATABASE IF EXISTS `{name}`")
    server.cursor().execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci")
    server.close()
    redis = RedisServer()
    redis.start()
    atexit.register(redis.close)
    os.environ.update(
        DATABASE_URL=url.rsplit("/", 1)[0] + "/" + name,
        REDIS_URL=redis.url,
        CELERY_BROKER_URL=redis.url,  # failed payments enqueue their release; nobody consumes it
        LOCK_KEY_PREFIX="soak",
        RESERVATION_TTL_SECONDS=str(args.ttl),
        EXPIRY_SWEEP_SECONDS=str(args.sweep_every),
        SWEEP_LEASE_SECONDS=str(args.lease),
        PAYMENT_SETTLE_AFTER_SECONDS=str(PAYMENT_SETTLE_AFTER),
    )
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("SECRET_KEY", "soak-only-not-a-secret")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    return redis
