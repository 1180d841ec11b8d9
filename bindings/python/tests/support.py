"""What the Python tests share: a loopback HTTP receiver, contexts, journals, and the test
servers `cargo xtask ci` starts (required under CI, skipped with a reason elsewhere)."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import os
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

import replaysafe


class Receiver:
    """An HTTP server on 127.0.0.1 that records every POST and answers `status`."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        self.status = 200
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                receiver.requests.append(
                    (self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        port = self.server.server_address[1]
        return f"http://127.0.0.1:{port}/hooks/orders"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def rfc3339(t: dt.datetime) -> str:
    return t.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def env_of(run_kind: str, run_id: str, days_ago: int = 0) -> dict[str, str]:
    """A run of `daily_orders` over the hour ending five minutes (and `days_ago` days) ago."""
    end = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=days_ago, minutes=5)
    return {
        "REPLAYSAFE_PIPELINE": "daily_orders",
        "REPLAYSAFE_RUN_ID": run_id,
        "REPLAYSAFE_RUN_KIND": run_kind,
        "REPLAYSAFE_WINDOW_START": rfc3339(end - dt.timedelta(hours=1)),
        "REPLAYSAFE_WINDOW_END": rfc3339(end),
    }


def current() -> replaysafe.Context:
    return replaysafe.context(env=env_of("scheduled", "scheduled__2026-12-01T00:00:00+00:00"))


def backfill() -> replaysafe.Context:
    return replaysafe.context(env=env_of("backfill", "backfill__2026-11-01T00:00:00+00:00", 30))


def records(journal: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in journal.read_text().splitlines()]


def server(variable: str) -> str:
    """A test server's address from `variable`: required under CI, else the test is skipped."""
    value = os.environ.get(variable)
    if not value:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{variable} is required under CI")
        pytest.skip(f"{variable} is not set: run under cargo xtask ci")
    return value


def fresh_postgres(prefix: str) -> tuple[Any, str, str]:
    """psycopg (from the path the test servers give), a fresh database's URL without its
    password, and the password."""
    admin_url = server("REPLAYSAFE_TEST_POSTGRES_URL")
    sys.path.insert(0, server("REPLAYSAFE_TEST_PSYCOPG_PYTHONPATH"))
    import psycopg  # type: ignore[import-not-found, unused-ignore]

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    scheme, rest = admin_url.split("://", 1)
    credentials, place = rest.split("@", 1)
    user, password = credentials.split(":", 1)
    return psycopg, f"{scheme}://{user}@{place.rsplit('/', 1)[0]}/{name}", password
