"""Database journals from Python: `journal="sqlite:PATH"` or `"postgres://…"` (password
from PGPASSWORD), the shared memory of keys of every client and process that uses them."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import replaysafe
from support import Receiver, env_of, fresh_postgres


def test_two_clients_sharing_a_database_journal_deliver_a_key_once(
    receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, postgres, password = fresh_postgres("py_journal")
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
    _, postgres, password = fresh_postgres("py_journal")
    monkeypatch.setenv("PGPASSWORD", "wrong-password-canary-4e1f")
    with pytest.raises(replaysafe.ConfigError) as refused:
        replaysafe.WebhookClient("https://partner.example/hooks", journal=postgres)
    shown = str(refused.value)
    assert "postgres://" in shown
    assert "canary" not in shown and password not in shown
