"""`send_async`: awaitables on the shared runtime, from asyncio code."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

import replaysafe
from support import Receiver, env_of, records


def test_webhooks_sent_concurrently_from_asyncio(receiver: Receiver, tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    hook = replaysafe.WebhookClient(receiver.url, allow_hosts=["127.0.0.1"], journal=journal)
    cx = replaysafe.context(env=env_of("scheduled", "scheduled__2026-12-01T00:00:00+00:00"))
    backfill = replaysafe.context(env=env_of("backfill", "backfill__2026-11-01T00:00:00+00:00", 30))

    async def main() -> list[replaysafe.Outcome]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        running = asyncio.create_task(ticker())
        outs = await asyncio.gather(
            *[hook.send_async(cx, event_type=f"orders.{n}", data={"n": n}) for n in range(20)],
            hook.send_async(backfill, event_type="orders.published", data={"n": 99}),
        )
        running.cancel()
        assert ticks > 0, "the event loop ran while the webhooks were sent"
        return list(outs)

    started = time.monotonic()
    outs = asyncio.run(main())
    assert time.monotonic() - started < 30
    assert [o.decision for o in outs[:20]] == ["delivered"] * 20
    assert outs[20].decision == "suppressed"
    assert len(receiver.requests) == 20
    assert len({o.idempotency_key for o in outs}) == 21
    assert sum(r["decision"] == "delivered" for r in records(journal)) == 20


def test_a_failure_raises_from_the_awaitable_only_when_asked(receiver: Receiver, tmp_path: Path) -> None:
    receiver.status = 400
    hook = replaysafe.WebhookClient(receiver.url, allow_hosts=["127.0.0.1"],
                                    journal=tmp_path / "journal.jsonl")
    cx = replaysafe.context(env=env_of("scheduled", "scheduled__2026-12-01T00:00:00+00:00"))

    async def main() -> replaysafe.Outcome:
        failed = await hook.send_async(cx, event_type="orders.a", data={})
        with pytest.raises(replaysafe.DeliveryError):
            await hook.send_async(cx, event_type="orders.b", data={}, raise_on_failure=True)
        return failed

    assert asyncio.run(main()).decision == "failed"


def test_every_client_has_an_awaitable_send(receiver: Receiver, tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    monkeypatch.setenv("SLACK_WEBHOOK_URL", receiver.url)
    journal = tmp_path / "journal.jsonl"
    cx = replaysafe.context(env=env_of("scheduled", "scheduled__2026-12-01T00:00:00+00:00"))
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.settimeout(5)
    slack = replaysafe.AlertClient("slack", url_env="SLACK_WEBHOOK_URL", allow_hosts=["127.0.0.1"],
                                   journal=journal)
    statsd = replaysafe.MetricClient("statsd", host="127.0.0.1", port=udp.getsockname()[1],
                                     journal=journal, ledger=False)
    trigger = replaysafe.TriggerClient(url=receiver.url, allow_hosts=["127.0.0.1"], journal=journal)

    async def main() -> tuple[replaysafe.Outcome, list[replaysafe.Outcome], replaysafe.Outcome]:
        return await asyncio.gather(
            slack.send_async(cx, alertname="orders_late", text="late"),
            statsd.send_async(cx, metrics={"a": 1, "b": 2}, type="counter"),
            trigger.send_async(cx, name="rebuild"),
        )

    alert, lines, triggered = asyncio.run(main())
    assert alert.decision == "delivered" and triggered.decision == "delivered"
    assert [o.decision for o in lines] == ["delivered", "delivered"]
    assert sorted(udp.recv(1024).decode().split("|")[0] for _ in range(2)) == ["a:1", "b:2"]
    assert len(receiver.requests) == 2
    # A bad metric is refused before any line is sent ("a" would go first).
    with pytest.raises(replaysafe.ConfigError, match="whole number"):
        statsd.send(cx, metrics={"a": 1, "b": 1.5}, type="counter")
    udp.settimeout(0.5)
    with pytest.raises(TimeoutError):
        udp.recv(1024)
    udp.close()
