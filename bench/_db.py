"""Point a benchmark at its own database (``<name>_bench``) so it never touches the shop's data."""

import os

import environ
import MySQLdb


def use_bench_database() -> str:
    """Call before ``django.setup()``: create ``<DATABASE_URL name>_bench`` and select it."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith("mysql"):
        raise SystemExit("Benchmarks run on MySQL/MariaDB: set DATABASE_URL=mysql://... (and REDIS_URL)")
    config = environ.Env.db_url_config(url)
    name = config["NAME"] if config["NAME"].endswith("_bench") else f"{config['NAME']}_bench"  # once per run
    connection = MySQLdb.connect(
        host=config["HOST"] or "127.0.0.1",
        port=int(config["PORT"] or 3306),
        user=config["USER"],
        passwd=config["PASSWORD"],
    )
    connection.cursor().execute(
        f"CREATE DATABASE IF NOT EXISTS `{name}` CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci"
    )
    connection.close()
    os.environ["DATABASE_URL"] = url.rsplit("/", 1)[0] + "/" + name
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    os.environ.setdefault("LOCK_KEY_PREFIX", "bench")
    os.environ.setdefault("SECRET_KEY", "bench-only-not-a-secret")
    return name


def empty_tables(*models) -> None:
    """Empty the models' tables with TRUNCATE (the SQL of Django's ``flush``), not DELETE.

    A DELETE leaves the old rows' pages, dirty, in MariaDB's buffer pool (128 MiB by default) for
    the cells that follow to flush or evict, which multiplies MariaDB's CPU per order on the paths
    that write to those tables. TRUNCATE recreates the tables instead.
    """
    from django.core.management.color import no_style
    from django.db import connection

    tables = [model._meta.db_table for model in models]
    connection.ops.execute_sql_flush(connection.ops.sql_flush(no_style(), tables, reset_sequences=True))
