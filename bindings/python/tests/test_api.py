"""`import replaysafe` through the installed wheel, against a real HTTP receiver on loopback.

Run by `cargo xtask ci` (phase "python wheel") in a fresh virtualenv holding only the wheel
and pytest.
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

import replaysafe
from support import Receiver, env_of, records

SECRET = "whsec_cHl0aG9uLWNhbmFyeS1zZWNyZXQtZG8tbm90LWxvZw=="


def test_a_scheduled_run_delivers_once_under_the_journaled_key(receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PARTNER_SECRET", SECRET)
    journal = tmp_path / "journal.jsonl"
    cx = replaysafe.context(env=env_of("scheduled", "scheduled__2026-12-01T00:00:00+00:00"))
    assert cx.run_kind == "scheduled" and not cx.is_replay
    assert cx.decide("webhook").delivers
    hook = replaysafe.WebhookClient(
        receiver.url, secret_env="PARTNER_SECRET", allow_hosts=["127.0.0.1"], journal=journal
    )

    out = hook.send(cx, event_type="orders.published", data={"orders": 1204})

    assert out.decision == "delivered" and out.delivered, out
    assert out.reasons == ["current_window"]
    assert len(out.idempotency_key) == 64
    assert len(receiver.requests) == 1
    path, headers, body = receiver.requests[0]
    assert path == "/hooks/orders"
    assert headers["webhook-id"] == out.idempotency_key
    assert headers["webhook-signature"].startswith("v1,")
    assert json.loads(body) == {"orders": 1204}, "the body is the data, as replaysafe send webhook sends it"
    decisions = [(r["decision"], r["effect"]["idempotency_key"]) for r in records(journal)]
    assert decisions == [("attempting", out.idempotency_key), ("delivered", out.idempotency_key)]

    # The same effect again (a retry, a cleared task): the journal remembers the key.
    again = hook.send(cx, event_type="orders.published", data={"orders": 1204})
    assert again.decision == "suppressed"
    assert "already_delivered" in again.reasons
    assert again.idempotency_key == out.idempotency_key
    assert len(receiver.requests) == 1


def test_a_backfill_sends_nothing_and_journals_suppressed(receiver: Receiver, tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    cx = replaysafe.context(env=env_of("backfill", "backfill__2026-11-01T00:00:00+00:00", 30))
    assert cx.is_replay
    hook = replaysafe.WebhookClient(receiver.url, allow_hosts=["127.0.0.1"], journal=journal)

    out = hook.send(cx, event_type="orders.published", data={"orders": 3})

    assert out.decision == "suppressed"
    assert "replay_run" in out.reasons and "stale_window" in out.reasons
    assert receiver.requests == []
    [record] = records(journal)
    assert record["decision"] == "suppressed"
    assert record["effect"]["idempotency_key"] == out.idempotency_key


def test_an_airflow_shaped_environment_resolves_as_the_command_does() -> None:
    start = dt.datetime(2026, 11, 1, tzinfo=dt.timezone.utc)
    env = {
        "AIRFLOW_CTX_DAG_ID": "daily_orders",
        "AIRFLOW_CTX_DAG_RUN_ID": "backfill__2026-11-01T00:00:00+00:00",
        "AIRFLOW_CTX_DATA_INTERVAL_START": "2026-11-01T00:00:00+00:00",
        "AIRFLOW_CTX_DATA_INTERVAL_END": "2026-11-02T00:00:00+00:00",
    }
    cx = replaysafe.context(env=env)
    assert (cx.pipeline, cx.run_kind) == ("daily_orders", "backfill")
    assert cx.window == (start, start + dt.timedelta(days=1))
    assert cx.window[0].tzinfo is not None
    assert not cx.decide("email").delivers


def test_a_run_without_a_window_suppresses_and_says_so() -> None:
    env = {
        "AIRFLOW_CTX_DAG_ID": "consumer",
        "AIRFLOW_CTX_DAG_RUN_ID": "asset_triggered__2026-12-01T10:00:00+00:00",
    }
    cx = replaysafe.context(env=env)
    assert cx.window is None
    decision = cx.decide("webhook")
    assert not decision.delivers and "unknown_window" in decision.reasons


def test_a_malformed_context_raises_context_error_naming_the_variable() -> None:
    env = env_of("scheduled", "scheduled__x")
    env["REPLAYSAFE_WINDOW_START"] = "yesterday"
    with pytest.raises(replaysafe.ContextError, match="REPLAYSAFE_WINDOW_START"):
        replaysafe.context(env=env)
    assert issubclass(replaysafe.ContextError, replaysafe.Error)


def test_a_bad_keyword_argument_is_named(tmp_path: Path) -> None:
    with pytest.raises(replaysafe.ConfigError, match="secert_env"):
        replaysafe.WebhookClient(
            "https://partner.example/hooks",
            secert_env="X",  # type: ignore[call-arg]  # the mistake under test
            journal=tmp_path / "j.jsonl",
        )
    with pytest.raises(replaysafe.ConfigError, match="journal"):
        replaysafe.WebhookClient("https://partner.example/hooks", journal=tmp_path)


def test_a_secret_pasted_where_a_variable_name_belongs_is_refused_without_repeating_it(tmp_path: Path) -> None:
    with pytest.raises(replaysafe.ConfigError) as refused:
        replaysafe.WebhookClient(
            "https://partner.example/hooks", secret_env=SECRET, journal=tmp_path / "j.jsonl"
        )
    assert "WebhookClient: secret_env" in str(refused.value), refused.value
    assert SECRET not in str(refused.value)
    # A secret typed into a field of another type is not quoted either.
    with pytest.raises(replaysafe.ConfigError) as refused:
        replaysafe.WebhookClient(
            "https://partner.example/hooks",
            allow_hosts=SECRET,  # type: ignore[arg-type]  # the mistake under test
            journal=tmp_path / "j.jsonl",
        )
    assert "wrong type" in str(refused.value) and SECRET not in str(refused.value)


def test_secrets_reach_no_repr_exception_or_journal(receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("PARTNER_SECRET", SECRET)
    journal = tmp_path / "journal.jsonl"
    cx = replaysafe.context(env=env_of("scheduled", "scheduled__2026-12-01T00:00:00+00:00"))
    hook = replaysafe.WebhookClient(
        receiver.url, secret_env="PARTNER_SECRET", allow_hosts=["127.0.0.1"], journal=journal
    )
    receiver.status = 400
    failed = hook.send(cx, event_type="orders.refused", data={"n": 1})
    with pytest.raises(replaysafe.DeliveryError) as raised:
        hook.send(cx, event_type="orders.refused.again", data={"n": 2}, raise_on_failure=True)
    shown = " ".join(
        [repr(hook), repr(cx), repr(failed), str(failed.error), str(raised.value), journal.read_text()]
        + list(capfd.readouterr())
    )
    assert failed.decision == "failed" and failed.error
    assert SECRET not in shown
    assert "cHl0aG9uLWNhbmFyeS1zZWNyZXQ" not in shown


def test_the_ssrf_guard_refuses_loopback_unless_allowed(receiver: Receiver, tmp_path: Path) -> None:
    cx = replaysafe.context(env=env_of("scheduled", "scheduled__2026-12-01T00:00:00+00:00"))
    hook = replaysafe.WebhookClient(receiver.url, journal=tmp_path / "journal.jsonl")
    out = hook.send(cx, event_type="orders.published", data={})
    assert out.decision == "failed", out
    assert receiver.requests == []


def test_report_is_the_commands_json(receiver: Receiver, tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    hook = replaysafe.WebhookClient(receiver.url, allow_hosts=["127.0.0.1"], journal=journal)
    hook.send(
        replaysafe.context(env=env_of("scheduled", "scheduled__r1")),
        event_type="orders.published",
        data={"day": 1},
    )
    hook.send(
        replaysafe.context(env=env_of("backfill", "backfill__r2", 10)),
        event_type="orders.published",
        data={"day": 2},
    )
    report = replaysafe.report(journal)
    assert report["records"] == 3
    delivered = sum(group["delivered"] for group in report["groups"])
    assert delivered == 1
    assert report["in_doubt"] == []
    with pytest.raises(replaysafe.Error, match="report"):
        replaysafe.report(tmp_path / "missing.jsonl")
