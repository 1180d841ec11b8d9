"""Database journals from Python: `journal="sqlite:PATH"` or `"postgres://…"` (password
from PGPASSWORD), the shared memory of keys of every client and process that uses them."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import replaysafe
from support import Receiver, env_of, fresh_postgres, records


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


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_client_used_in_a_forked_child_opens_its_journal_file_again(
    receiver: Receiver, tmp_path: Path
) -> None:
    """A descriptor inherited across fork shares its lock with the parent, so the lock
    would no longer keep their claims apart: the child opens the journal's path again. The
    path is renamed away before the fork, so which file the child writes tells."""
    import os

    journal = tmp_path / "journal.jsonl"
    cx = replaysafe.context(env=env_of("scheduled", "scheduled__2026-12-01T00:00:00+00:00"))
    hook = replaysafe.WebhookClient(receiver.url, allow_hosts=["127.0.0.1"], journal=journal)
    first = hook.send(cx, event_type="orders.first", data={})
    assert first.decision == "delivered"
    journal.rename(tmp_path / "before-fork.jsonl")
    failure = tmp_path / "child-failure.txt"

    pid = os.fork()
    if pid == 0:  # the child: report any failure through a file, then leave at once
        code = 1
        try:
            second = hook.send(cx, event_type="orders.second", data={})
            assert second.decision == "delivered", second
            code = 0
        except BaseException as error:  # noqa: BLE001 (reported to the parent)
            failure.write_text(repr(error))
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, failure.read_text() if failure.exists() else status

    def keys(path: Path) -> list[tuple[str, str]]:
        return [(r["decision"], r["effect"]["message_type"]) for r in records(path)]

    assert keys(tmp_path / "before-fork.jsonl") == [
        ("attempting", "orders.first"),
        ("delivered", "orders.first"),
    ], "the child wrote to the descriptor it inherited"
    assert keys(journal) == [("attempting", "orders.second"), ("delivered", "orders.second")]
    # The parent's own descriptor is its own: it still writes where it opened.
    third = hook.send(cx, event_type="orders.third", data={})
    assert third.decision == "delivered"
    assert keys(tmp_path / "before-fork.jsonl")[-1] == ("delivered", "orders.third")
