"""`replaysafe.outbox.stage` on the caller's own sqlite3 and psycopg connections, delivered
by the installed `replaysafe outbox work`."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

import replaysafe
from support import Outbox, Receiver, command, env_of, fresh_postgres, records


def routes_file(tmp_path: Path, receiver: Receiver) -> Path:
    routes = tmp_path / "routes.json"
    partner = {"kind": "webhook", "url": receiver.url, "allow_hosts": ["127.0.0.1"]}
    routes.write_text(json.dumps({"routes": {"partner": partner}}))
    return routes


def client(receiver: Receiver, journal: Path) -> replaysafe.WebhookClient:
    return replaysafe.WebhookClient(receiver.url, allow_hosts=["127.0.0.1"], journal=journal)


def test_sqlite_rolled_back_leaves_no_row_committed_is_delivered_once(
    receiver: Receiver, tmp_path: Path
) -> None:
    db, journal = tmp_path / "outbox.db", tmp_path / "journal.jsonl"
    command("outbox", "init", "--database", f"sqlite:{db}")
    hook = client(receiver, journal)
    cx = replaysafe.context(env=env_of("scheduled", "scheduled__2026-12-01T00:00:00+00:00"))
    effect = replaysafe.Webhook(event_type="orders.published", data={"orders": 1204})
    conn = sqlite3.connect(db)

    with pytest.raises(RuntimeError):
        with conn:
            conn.execute("CREATE TABLE IF NOT EXISTS totals (day TEXT, orders INTEGER)")
            replaysafe.outbox.stage(conn, cx, route="partner", effect=effect, client=hook)
            raise RuntimeError("the task failed after staging")
    assert conn.execute("SELECT COUNT(*) FROM replaysafe_outbox").fetchone() == (0,)

    with conn:
        staged = replaysafe.outbox.stage(conn, cx, route="partner", effect=effect, client=hook)
    assert (staged.status, staged.reasons, staged.changed) == ("pending", ["current_window"], True)
    row = conn.execute(
        "SELECT run_kind, status FROM replaysafe_outbox WHERE idempotency_key = ?", (staged.key,)
    ).fetchone()
    assert row == ("scheduled", "pending")
    conn.close()

    routes = routes_file(tmp_path, receiver)
    for _ in range(2):  # a second worker run finds nothing due
        command("outbox", "work", "--database", f"sqlite:{db}", "--routes", str(routes),
                "--journal", str(journal), "--drain")
    assert len(receiver.requests) == 1
    assert receiver.requests[0][1]["idempotency-key"].strip('"') == staged.key
    assert [r["decision"] for r in records(journal)] == ["attempting", "delivered"]


def test_a_backfill_stages_a_suppressed_row_that_no_worker_delivers(
    receiver: Receiver, tmp_path: Path
) -> None:
    db, journal = tmp_path / "outbox.db", tmp_path / "journal.jsonl"
    command("outbox", "init", "--database", f"sqlite:{db}")
    hook = client(receiver, journal)
    cx = replaysafe.context(env=env_of("backfill", "backfill__2026-11-01T00:00:00+00:00", 30))
    conn = sqlite3.connect(db)
    with conn:
        staged = replaysafe.outbox.stage(
            conn, cx, route="partner",
            effect=replaysafe.Webhook(event_type="orders.published", data={"orders": 3}),
            client=hook,
        )
    assert staged.status == "suppressed"
    assert "replay_run" in staged.reasons
    assert [r["decision"] for r in records(journal)] == ["suppressed"]
    conn.close()
    command("outbox", "work", "--database", f"sqlite:{db}", "--routes",
            str(routes_file(tmp_path, receiver)), "--journal", str(journal), "--drain")
    assert receiver.requests == []


def test_rows_of_one_ordering_key_are_placed_in_staging_order_and_delivered_so(
    receiver: Receiver, tmp_path: Path
) -> None:
    db, journal = tmp_path / "outbox.db", tmp_path / "journal.jsonl"
    command("outbox", "init", "--database", f"sqlite:{db}")
    hook = client(receiver, journal)
    cx = replaysafe.context(env=env_of("scheduled", "scheduled__2026-12-01T00:00:00+00:00"))
    conn = sqlite3.connect(db)
    keys = []
    for n in (3, 1, 2):
        with conn:
            staged = replaysafe.outbox.stage(
                conn, cx, route="partner", client=hook, ordering_key="account-7",
                effect=replaysafe.Webhook(event_type=f"account.changed.{n}", data={"n": n}),
            )
        keys.append(staged.key)
    placed = conn.execute(
        "SELECT idempotency_key, ordering_key, ordering_seq FROM replaysafe_outbox ORDER BY ordering_seq"
    ).fetchall()
    assert placed == [(key, "account-7", seq) for seq, key in enumerate(keys, start=1)]

    with pytest.raises(replaysafe.ConfigError, match="ordering_key"):
        with conn:
            replaysafe.outbox.stage(
                conn, cx, route="partner", client=hook, ordering_key="two\nlines",
                effect=replaysafe.Webhook(event_type="account.changed.4", data={"n": 4}),
            )
    assert conn.execute("SELECT COUNT(*) FROM replaysafe_outbox").fetchone() == (3,)
    conn.close()

    command("outbox", "work", "--database", f"sqlite:{db}", "--routes",
            str(routes_file(tmp_path, receiver)), "--journal", str(journal), "--drain",
            "--in-flight", "8")
    delivered = [headers["idempotency-key"].strip('"') for _, headers, _ in receiver.requests]
    assert delivered == keys


def test_a_connection_of_another_kind_is_refused(receiver: Receiver, tmp_path: Path) -> None:
    hook = client(receiver, tmp_path / "journal.jsonl")
    cx = replaysafe.context(env=env_of("scheduled", "scheduled__x"))
    with pytest.raises(TypeError, match="conn"):
        replaysafe.outbox.stage(
            object(), cx, route="partner",
            effect=replaysafe.Webhook(event_type="orders.published", data={}), client=hook,
        )


def test_psycopg_rolled_back_leaves_no_row_committed_is_delivered(
    receiver: Receiver, tmp_path: Path
) -> None:
    psycopg, url, password = fresh_postgres("py_outbox")
    url = url.replace("@", f":{password}@", 1)
    journal = tmp_path / "journal.jsonl"
    command("outbox", "init", "--database", url)
    hook = client(receiver, journal)
    cx = replaysafe.context(env=env_of("scheduled", "scheduled__2026-12-01T00:00:00+00:00"))
    effect = replaysafe.Webhook(event_type="orders.published", data={"orders": 7})

    with psycopg.connect(url) as conn:
        with pytest.raises(RuntimeError):
            with conn.transaction():
                replaysafe.outbox.stage(conn, cx, route="partner", effect=effect, client=hook)
                raise RuntimeError("the task failed after staging")
        assert conn.execute("SELECT COUNT(*) FROM replaysafe_outbox").fetchone() == (0,)
        with conn.transaction():
            staged = replaysafe.outbox.stage(conn, cx, route="partner", effect=effect, client=hook)
        assert staged.status == "pending" and staged.changed

    command("outbox", "work", "--database", url, "--routes", str(routes_file(tmp_path, receiver)),
            "--journal", str(journal), "--drain")
    assert len(receiver.requests) == 1
    assert receiver.requests[0][1]["idempotency-key"].strip('"') == staged.key


def test_the_route_comes_from_the_workers_routes_file_by_default(
    receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, journal = tmp_path / "outbox.db", tmp_path / "journal.jsonl"
    command("outbox", "init", "--database", f"sqlite:{db}")
    routes = routes_file(tmp_path, receiver)
    monkeypatch.setenv("REPLAYSAFE_OUTBOX_ROUTES", str(routes))
    monkeypatch.setenv("REPLAYSAFE_JOURNAL", str(journal))
    cx = replaysafe.context(env=env_of("scheduled", "scheduled__2026-12-01T00:00:00+00:00"))
    effect = replaysafe.Webhook(event_type="orders.published", data={"orders": 5})
    conn = sqlite3.connect(db)
    with conn:
        staged = replaysafe.outbox.stage(conn, cx, route="partner", effect=effect)
    assert staged.status == "pending"
    conn.close()
    # The worker reads the same file (REPLAYSAFE_OUTBOX_ROUTES) and derives the same key.
    command("outbox", "work", "--database", f"sqlite:{db}", "--journal", str(journal), "--drain",
            env={"REPLAYSAFE_OUTBOX_ROUTES": str(routes)})
    assert len(receiver.requests) == 1
    assert receiver.requests[0][1]["idempotency-key"].strip('"') == staged.key

    with pytest.raises(replaysafe.ConfigError, match="nobody"):
        replaysafe.outbox.stage(sqlite3.connect(db), cx, route="nobody", effect=effect)
    monkeypatch.delenv("REPLAYSAFE_OUTBOX_ROUTES")
    with pytest.raises(replaysafe.ConfigError, match="REPLAYSAFE_OUTBOX_ROUTES"):
        replaysafe.outbox.stage(sqlite3.connect(db), cx, route="partner", effect=effect)


def test_an_edited_routes_file_is_followed_by_the_next_staging(
    receiver: Receiver, tmp_path: Path
) -> None:
    def partner(at: Receiver) -> dict[str, dict[str, object]]:
        return {"partner": {"kind": "webhook", "url": at.url, "allow_hosts": ["127.0.0.1"]}}

    outbox = Outbox(tmp_path, partner(receiver))
    cx = replaysafe.context(env=env_of("scheduled", "scheduled__2026-12-01T00:00:00+00:00"))
    effect = replaysafe.Webhook(event_type="orders.published", data={"orders": 5})
    before = outbox.stage(cx, "partner", effect)
    # The operator moves the partner to another endpoint; this process stays up.
    moved = Receiver()
    try:
        outbox.set_routes(partner(moved))
        after = outbox.stage(cx, "partner", effect)
        assert after.key != before.key, "the endpoint is part of the key"
        outbox.work()
        # The worker reads the same new file: the row staged after the edit goes to the new
        # endpoint; the one staged before it is dead-lettered, not sent under another key.
        assert [h["idempotency-key"].strip('"') for _, h, _ in moved.requests] == [after.key]
        assert receiver.requests == []
        assert outbox.statuses() == {before.key: "dead", after.key: "delivered"}
        assert any(r["decision"] == "failed" and "key_mismatch" in r["reasons"]
                   for r in records(outbox.journal))
    finally:
        moved.close()
