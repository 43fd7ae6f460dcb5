"""The PostgreSQL server the database tests use (LAUNCHDECK_TEST_POSTGRES, by default the local one)."""

from __future__ import annotations

import os

import psycopg

POSTGRES_ADMIN_URL = os.environ.get("LAUNCHDECK_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/postgres")


def postgres_available() -> bool:
    try:
        with psycopg.connect(POSTGRES_ADMIN_URL, connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False
