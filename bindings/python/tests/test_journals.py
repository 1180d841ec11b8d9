"""Database journals from Python: `journal="sqlite:PATH"` or `"postgres://…"` (password
from PGPASSWORD), the shared memory of keys of every client and process that uses them."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import replaysafe
from test_api import Receiver, env_of


@pytest.fixture()
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def fresh_postgres() -> tuple[str, str]:
    """A fresh database's URL without its password, and the password."""
    url = os.environ.get("REPLAYSAFE_TEST_POSTGRES_URL")
    path = os.environ.get("REPLAYSAFE_TEST_PSYCOPG_PYTHONPATH")
    if not url or not path:
        if os.environ.get("CI") == "true":
            pytest.fail("REPLAYSAFE_TEST_POSTGRES_URL and REPLAYSAFE_TEST_PSYCOPG_PYTHONPATH are required under CI")
        pytest.skip("no PostgreSQL test server: run under cargo xtask ci")
    sys.path.insert(0, path)
    import psycopg  # type: ignore[import-not-found, unused-ignore]

    name = f"py_journal_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE DATABASE {name}")
    scheme, rest = url.split("://", 1)
    credentials, place = rest.split("@", 1)
    user, password = credentials.split(":", 1)
    return f"{scheme}://{user}@{place.rsplit('/', 1)[0]}/{name}", password


def test_two_clients_sharing_a_database_journal_deliver_a_key_once(
    receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    postgres, password = fresh_postgres()
    monkeypatch.setenv("PGPASSWORD", password)
    cx = replaysafe.context(env=env_of("scheduled", "scheduled__2026-12-01T00:00:00+00:00"))
    for journal in [f"sqlite:{tmp_path / 'journal.db'}", postgres]:
        before = len(receiver.requests)
        first, second = (
            replaysafe.WebhookClient(receiver.url, allow_hosts=["127.0.0.1"], journal=journal)
            for _ in range(2)
        )
        event = f"orders.{uuid.uuid4().hex[:8]}"
        assert first.send(cx, event_type=event, data={}).decision == "delivered"
        again = second.send(cx, event_type=event, data={})
        assert (again.decision, again.reasons) == ("suppressed", ["already_delivered"]), journal
        assert len(receiver.requests) == before + 1


def test_a_wrong_password_is_a_config_error_that_shows_no_password(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    postgres, password = fresh_postgres()
    monkeypatch.setenv("PGPASSWORD", "wrong-password-canary-4e1f")
    with pytest.raises(replaysafe.ConfigError) as refused:
        replaysafe.WebhookClient("https://partner.example/hooks", journal=postgres)
    shown = str(refused.value)
    assert "postgres://" in shown
    assert "canary" not in shown and password not in shown
