"""What the Python tests share: a loopback HTTP receiver, contexts, journals, and the test
servers `cargo xtask ci` starts (required under CI, skipped with a reason elsewhere)."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import os
import sqlite3
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import replaysafe
from replaysafe.outbox import Staged


class Receiver:
    """An HTTP server on 127.0.0.1 that records every POST and answers `status`; with
    `keep_alive`, over HTTP/1.1 connections that stay open for the next request."""

    def __init__(self, keep_alive: bool = False) -> None:
        self.requests: list[tuple[str, dict[str, str], bytes]] = []
        # The client's port of each request: which connection it came over.
        self.ports: list[int] = []
        self.status = 200
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1" if keep_alive else "HTTP/1.0"

            def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
                length = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(length)
                receiver.requests.append(
                    (self.path, {k.lower(): v for k, v in self.headers.items()}, body)
                )
                receiver.ports.append(self.client_address[1])
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


def command(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Runs the installed `replaysafe` command (the wheel puts it beside the interpreter,
    in the virtualenv's bin) without the test process's REPLAYSAFE_* variables, plus
    `env`; it must succeed."""
    binary = str(Path(sys.executable).parent / "replaysafe")
    assert os.access(binary, os.X_OK), "the wheel installs replaysafe into the virtualenv"
    full = {k: v for k, v in os.environ.items() if not k.startswith("REPLAYSAFE_")}
    full.update(env or {})
    done = subprocess.run([binary, *args], env=full, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


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


def run_in_child(child: Callable[[], None], failure: Path, seconds: float = 30) -> None:
    """Forks, runs `child` in the child (its failure reported through `failure`), and
    waits for it; a child still running after `seconds` is killed and the test fails."""
    import os
    import time

    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            child()
            code = 0
        except BaseException as error:  # noqa: BLE001 (reported to the parent)
            failure.write_text(repr(error))
        finally:
            os._exit(code)
    deadline = time.monotonic() + seconds
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
            pytest.fail("the forked child hung on what it inherited from its parent")
        time.sleep(0.05)
    assert os.waitstatus_to_exitcode(status) == 0, failure.read_text() if failure.exists() else status



def connections_to(port: int) -> set[int]:
    """The local ports of this process's established TCP connections to 127.0.0.1:`port`
    (from /proc: which connection a client holds, and whether it opened a new one)."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    ports = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
        if inode in inodes and state == "01" and int(remote.split(":")[1], 16) == port:
            ports.add(int(local.split(":")[1], 16))
    return ports


One = replaysafe.Webhook | replaysafe.Trigger | replaysafe.Alert | replaysafe.FileDrop
Several = replaysafe.Email | replaysafe.Metrics


class Outbox:
    """A SQLite outbox, its routes file and its journal, and the worker that drains it."""

    def __init__(self, tmp_path: Path, routes: dict[str, dict[str, object]]) -> None:
        self.db = tmp_path / "outbox.db"
        self.journal = tmp_path / "journal.jsonl"
        self.routes = tmp_path / "routes.json"
        self.set_routes(routes)
        command("outbox", "init", "--database", f"sqlite:{self.db}")
        self.conn = sqlite3.connect(self.db)

    def set_routes(self, routes: dict[str, dict[str, object]]) -> None:
        """Writes the routes file: route name to client configuration."""
        self.routes.write_text(json.dumps({"routes": routes}))

    def stage(self, cx: replaysafe.Context, route: str, effect: One) -> Staged:
        """Stages an effect of one row, in a transaction of its own."""
        with self.conn:
            return replaysafe.outbox.stage(self.conn, cx, route=route, effect=effect,
                                           routes=self.routes, journal=self.journal)

    def stage_rows(self, cx: replaysafe.Context, route: str, effect: Several) -> list[Staged]:
        """Stages an effect of several rows, in a transaction of its own."""
        with self.conn:
            return replaysafe.outbox.stage(self.conn, cx, route=route, effect=effect,
                                           routes=self.routes, journal=self.journal)

    def statuses(self) -> dict[str, str]:
        """Each row's status, by key."""
        return dict(self.conn.execute("SELECT idempotency_key, status FROM replaysafe_outbox"))

    def work(self, env: dict[str, str] | None = None) -> None:
        command("outbox", "work", "--database", f"sqlite:{self.db}", "--routes", str(self.routes),
                "--journal", str(self.journal), "--drain", env=env)
