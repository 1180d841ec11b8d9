"""A client used in a child of `fork` after its parent sent: the child opens connections
of its own. The parent's pooled connections are the same sockets in the child, driven by
threads the child does not have; used there, a request waited for an answer nobody read
until its timeout (15 s for a webhook), or wrote into a session the parent was using."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

import replaysafe
from support import Receiver, connections_to, env_of, records, run_in_child, server

pytestmark = pytest.mark.filterwarnings(
    "ignore:This process .* is multi-threaded:DeprecationWarning"
)

#: Well under every client's timeout: a child that reused its parent's connection waited
#: for the timeout, then tried again on a new one.
QUICK = 5.0


def current() -> replaysafe.Context:
    return replaysafe.context(env=env_of("scheduled", "scheduled__2026-12-01T00:00:00+00:00"))


def quickly_on_the_first_attempt(send: replaysafe.Outcome, started: float) -> None:
    assert send.decision == "delivered", send
    assert send.attempts == 1, f"a first attempt failed: {send}"
    assert time.monotonic() - started < QUICK, "the send waited on the parent's connection"


def test_a_webhook_client_opens_its_own_connections_in_a_forked_child(tmp_path: Path) -> None:
    receiver = Receiver(keep_alive=True)
    try:
        hook = replaysafe.WebhookClient(
            receiver.url, allow_hosts=["127.0.0.1"], journal=tmp_path / "journal.jsonl"
        )
        assert hook.send(current(), event_type="orders.first", data={}).delivered

        def child() -> None:
            started = time.monotonic()
            quickly_on_the_first_attempt(
                hook.send(current(), event_type="orders.second", data={}), started
            )

        run_in_child(child, tmp_path / "child-failure.txt")
        assert hook.send(current(), event_type="orders.third", data={}).delivered
        assert len(receiver.requests) == 3
        first, second, third = receiver.ports
        assert first == third, "the parent kept its connection (so there was one to inherit)"
        assert second != first, "the child sent over its parent's connection"
    finally:
        receiver.close()


def parent_child_parent(
    port: int, send: Callable[[str], replaysafe.Outcome], journal: Path, tmp_path: Path
) -> None:
    """The parent sends (and keeps its connection to `port`), a forked child sends over a
    connection of its own, then the parent sends again over the same one it kept; no
    attempt fails. Connections of clients of earlier tests in this process are not
    counted, and the client opens none before its first send."""
    others = connections_to(port)
    assert send("parent").delivered
    kept = connections_to(port) - others
    assert len(kept) == 1, "the parent keeps its connection (so there is one to inherit)"

    def child() -> None:
        started = time.monotonic()
        quickly_on_the_first_attempt(send("child"), started)
        assert connections_to(port) - others - kept, "the child sent over its parent's"

    run_in_child(child, tmp_path / "child-failure.txt")
    # The parent's connection is still its own and works: the child neither used nor
    # closed it (an SSH or SMTP session another process wrote into is broken or mixed).
    started = time.monotonic()
    quickly_on_the_first_attempt(send("again"), started)
    assert connections_to(port) - others == kept
    failed = [r for r in records(journal) if r["decision"] == "failed"]
    assert failed == [], failed


def test_an_email_client_opens_its_own_smtp_sessions_in_a_forked_child(tmp_path: Path) -> None:
    port = int(server("REPLAYSAFE_TEST_SMTP_PORT"))
    journal = tmp_path / "journal.jsonl"
    mailer = replaysafe.EmailClient(f"smtp://127.0.0.1:{port}", journal=journal)
    subject = f"forked {uuid.uuid4()}"

    def send(who: str) -> replaysafe.Outcome:
        [outcome] = mailer.send(current(), message_type="daily_summary",
                                sender="reports@shop.example", to=[f"{who}@shop.example"],
                                subject=subject, text="1204 orders")
        return outcome

    parent_child_parent(port, send, journal, tmp_path)


def test_an_sftp_client_opens_its_own_sessions_in_a_forked_child(tmp_path: Path) -> None:
    upload = Path(server("REPLAYSAFE_TEST_SSHD_UPLOAD"))
    port = int(server("REPLAYSAFE_TEST_SSHD_PORT"))
    journal = tmp_path / "journal.jsonl"
    drops = replaysafe.SftpClient(
        host="127.0.0.1", port=port,
        user=server("REPLAYSAFE_TEST_SSHD_USER"), key=server("REPLAYSAFE_TEST_SSHD_KEY"),
        known_hosts=server("REPLAYSAFE_TEST_SSHD_KNOWN_HOSTS"), dir=str(upload),
        journal=journal,
    )
    stem = f"forked_{uuid.uuid4().hex[:10]}"

    def drop(part: str) -> replaysafe.Outcome:
        return drops.send(current(), name=f"{stem}_{part}.csv", data=part.encode(),
                          message_type=f"orders_{part}")

    parent_child_parent(port, drop, journal, tmp_path)
    for part in ["parent", "child", "again"]:
        assert (upload / f"{stem}_{part}.csv").read_bytes() == part.encode()
