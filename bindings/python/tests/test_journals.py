"""Database journals from Python: `journal="sqlite:PATH"` or `"postgres://…"` (password
from PGPASSWORD), the shared memory of keys of every client and process that uses them."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

import replaysafe
from support import Receiver, env_of, fresh_postgres, records, run_in_child


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


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_postgres_journal_used_in_a_forked_child_connects_again_and_keeps_the_memory(
    receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The journal's connection lives on a thread of the parent, which a fork does not
    copy: the child connects again. The database is the memory of both processes."""
    psycopg, postgres, password = fresh_postgres("py_fork")
    monkeypatch.setenv("PGPASSWORD", password)
    cx = replaysafe.context(env=env_of("scheduled", "scheduled__2026-12-01T00:00:00+00:00"))
    hook = replaysafe.WebhookClient(receiver.url, allow_hosts=["127.0.0.1"], journal=postgres)
    first, second = (f"orders.{uuid.uuid4().hex[:8]}" for _ in range(2))
    assert hook.send(cx, event_type=first, data={}).decision == "delivered"

    def child() -> None:
        again = hook.send(cx, event_type=first, data={})
        assert (again.decision, again.reasons) == ("suppressed", ["already_delivered"]), again
        assert hook.send(cx, event_type=second, data={}).decision == "delivered"

    run_in_child(child, tmp_path / "child-failure.txt")
    # The parent's connection is still its own, and it knows what the child delivered.
    again = hook.send(cx, event_type=second, data={})
    assert (again.decision, again.reasons) == ("suppressed", ["already_delivered"]), again
    assert hook.send(cx, event_type=f"orders.{uuid.uuid4().hex[:8]}", data={}).decision == "delivered"
    assert len(receiver.requests) == 3
    with psycopg.connect(postgres, password=password) as db:
        decisions = db.execute(
            "SELECT decision, count(*) FROM replaysafe_journal GROUP BY decision ORDER BY decision"
        ).fetchall()
    assert decisions == [("attempting", 3), ("delivered", 3), ("suppressed", 2)]


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_sqlite_journal_used_in_a_forked_child_opens_its_database_again(
    receiver: Receiver, tmp_path: Path
) -> None:
    """SQLite's locks are the process's own, so a connection carried across a fork would
    not keep the child's transactions apart from the parent's: the child opens the path
    again. The database is renamed away before the fork, so which one the child writes
    tells."""
    import sqlite3

    path = tmp_path / "journal.db"
    cx = replaysafe.context(env=env_of("scheduled", "scheduled__2026-12-01T00:00:00+00:00"))
    hook = replaysafe.WebhookClient(
        receiver.url, allow_hosts=["127.0.0.1"], journal=f"sqlite:{path}"
    )
    assert hook.send(cx, event_type="orders.first", data={}).decision == "delivered"
    for suffix in ["", "-wal", "-shm"]:
        moved = Path(f"{path}{suffix}")
        if moved.exists():
            moved.rename(tmp_path / f"before-fork.db{suffix}")

    def child() -> None:
        assert hook.send(cx, event_type="orders.second", data={}).decision == "delivered"

    run_in_child(child, tmp_path / "child-failure.txt")

    def message_types(database: Path) -> list[str]:
        with sqlite3.connect(database) as db:
            lines = db.execute("SELECT line FROM replaysafe_journal ORDER BY seq").fetchall()
        return [json.loads(line)["effect"]["message_type"] for (line,) in lines]

    assert message_types(path) == ["orders.second", "orders.second"]
    assert message_types(tmp_path / "before-fork.db") == ["orders.first", "orders.first"], (
        "the child wrote through the connection it inherited"
    )
