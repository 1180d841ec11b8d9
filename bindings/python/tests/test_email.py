"""`replaysafe.EmailClient` against the real SMTP server the Rust tests use (aiosmtpd,
writing what it accepts to a maildir)."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

import replaysafe
from support import env_of, records, server


def smtp() -> tuple[str, Path]:
    port = server("REPLAYSAFE_TEST_SMTP_PORT")
    return f"smtp://127.0.0.1:{port}", Path(server("REPLAYSAFE_TEST_SMTP_MAILDIR"))


def arrived(maildir: Path, subject: str) -> int:
    return sum(
        1
        for path in maildir.rglob("*")
        if path.is_file() and subject in path.read_text(errors="replace")
    )


def test_one_message_per_recipient_once_and_none_from_a_backfill(tmp_path: Path) -> None:
    url, maildir = smtp()
    journal = tmp_path / "journal.jsonl"
    mailer = replaysafe.EmailClient(url, journal=journal)
    subject = f"orders {uuid.uuid4()}"
    to = ["ana@shop.example", "bo@shop.example"]
    cx = replaysafe.context(env=env_of("scheduled", "scheduled__2026-12-01T00:00:00+00:00"))

    def send(cx: replaysafe.Context) -> list[replaysafe.Outcome]:
        return mailer.send(cx, message_type="daily_summary", sender="reports@shop.example",
                           to=to, subject=subject, text="1204 orders")

    sent = send(cx)
    assert [(o.target, o.decision) for o in sent] == [(t, "delivered") for t in to]
    assert len({o.idempotency_key for o in sent}) == 2, "one key per recipient"
    assert arrived(maildir, subject) == 2

    # A cleared task sends the same email again: nothing leaves, the journal says why.
    again = send(cx)
    assert [o.decision for o in again] == ["suppressed", "suppressed"]
    assert all("already_delivered" in o.reasons for o in again)
    assert arrived(maildir, subject) == 2

    backfill = replaysafe.context(env=env_of("backfill", "backfill__2026-11-01T00:00:00+00:00", 30))
    late = mailer.send(backfill, message_type="daily_summary", sender="reports@shop.example",
                       to=to, subject=subject + " backfill", text="1204 orders")
    assert [o.decision for o in late] == ["suppressed", "suppressed"]
    assert arrived(maildir, subject + " backfill") == 0
    decisions = [r["decision"] for r in records(journal)]
    assert decisions.count("delivered") == 2 and decisions.count("suppressed") == 4


def test_bad_input_is_named_and_nothing_is_sent(tmp_path: Path) -> None:
    url, maildir = smtp()
    journal = tmp_path / "journal.jsonl"
    with pytest.raises(replaysafe.ConfigError, match="smtp"):
        replaysafe.EmailClient("smtp://user:pw@127.0.0.1:25", journal=journal)
    with pytest.raises(replaysafe.ConfigError, match="passwrd_env"):
        replaysafe.EmailClient(url, passwrd_env="X", journal=journal)  # type: ignore[call-arg]
    mailer = replaysafe.EmailClient(url, journal=journal)
    cx = replaysafe.context(env=env_of("scheduled", "scheduled__x"))
    subject = f"bad {uuid.uuid4()}"
    with pytest.raises(replaysafe.ConfigError):
        mailer.send(cx, message_type="daily_summary", sender="not an address",
                    to=["ana@shop.example"], subject=subject, text="x")
    assert arrived(maildir, subject) == 0
