"""replaysafe.Gate: the gate around a call of one's own (what replaysafe.airflow wraps
Airflow's operators with)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import replaysafe
from support import Receiver, backfill, current, run_in_child


def records(journal: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in journal.read_text().splitlines()]


def test_a_current_run_calls_once_per_key_and_a_backfill_never(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    gate = replaysafe.Gate("email", journal=journal)
    calls: list[str] = []

    def send(key: str) -> None:
        calls.append(key)

    first = gate.send(
        current(), message_type="daily_summary", target="ana@shop.example", call=send,
        summary="Daily orders", payload=b"<p>hi</p>",
    )
    assert first.decision == "delivered"
    assert calls == [first.idempotency_key]
    # The same effect again (a cleared task): the ledger suppresses, nothing is called.
    again = gate.send(
        current(), message_type="daily_summary", target="ana@shop.example", call=send
    )
    assert again.decision == "suppressed"
    assert "already_delivered" in again.reasons
    assert calls == [first.idempotency_key]
    # A backfill: not called, journaled as it would have been sent, recipient *@domain.
    replay = gate.send(
        backfill(), message_type="daily_summary", target="ana@shop.example", call=send,
        summary="Daily orders",
    )
    assert replay.decision == "suppressed" and "replay_run" in replay.reasons
    assert len(calls) == 1
    shown = records(journal)[-1]
    assert shown["decision"] == "suppressed"
    assert shown["effect"]["target"] == "*@shop.example"  # type: ignore[index]
    assert "ana@" not in journal.read_text()


def test_an_exception_is_raised_again_and_journaled_by_its_type_only(tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    gate = replaysafe.Gate("webhook", journal=journal)

    class PartnerDown(Exception):
        pass

    def send(key: str) -> None:
        raise PartnerDown("token=s3cr3t-canary refused")

    with pytest.raises(PartnerDown, match="s3cr3t-canary"):
        gate.send(current(), message_type="notify", target="https://partner.example/h?k=1", call=send)
    text = journal.read_text()
    assert "s3cr3t-canary" not in text
    failed = [r for r in records(journal) if r["decision"] == "failed"]
    assert len(failed) == 1 and "PartnerDown" in json.dumps(failed[0])
    assert "k=1" not in text and "/h" not in text  # the origin only


def test_bad_arguments_are_refused_naming_them(tmp_path: Path) -> None:
    with pytest.raises(replaysafe.ConfigError, match="kind"):
        replaysafe.Gate("Not A Kind", journal=tmp_path / "j.jsonl")
    with pytest.raises(replaysafe.ConfigError, match="redact"):
        replaysafe.Gate("email", redact="some", journal=tmp_path / "j.jsonl")
    gate = replaysafe.Gate("email", journal=tmp_path / "j.jsonl")
    with pytest.raises(replaysafe.ConfigError, match="call"):
        gate.send(current(), message_type="m", target="a@b.example", call="not callable")  # type: ignore[arg-type]
    with pytest.raises(replaysafe.ConfigError, match="target"):
        gate.send(current(), message_type="m", target="", call=lambda key: None)
    assert not (tmp_path / "j.jsonl").exists() or "attempting" not in (tmp_path / "j.jsonl").read_text()


def test_a_forked_child_sends_on_a_runtime_of_its_own(receiver: Receiver, tmp_path: Path) -> None:
    # Airflow's scheduler, executor and task supervisor fork after importing the
    # integration; a runtime's threads do not survive a fork.
    client = replaysafe.WebhookClient(
        url=receiver.url, allow_hosts=["127.0.0.1"], journal=tmp_path / "parent.jsonl"
    )
    assert client.send(current(), event_type="parent", data={}).delivered

    def child() -> None:  # its own journal, the parent's client
        child = replaysafe.WebhookClient(
            url=receiver.url, allow_hosts=["127.0.0.1"], journal=tmp_path / "child.jsonl"
        )
        assert child.send(current(), event_type="child", data={}).delivered

    run_in_child(child, tmp_path / "child-failure.txt", seconds=20)
    assert len(receiver.requests) == 2
