"""Triggers, alerts and metrics from Python, against the real Alertmanager and Pushgateway
the Rust tests use, a loopback receiver (trigger URL, Slack) and a UDP socket (StatsD)."""

from __future__ import annotations

import json
import socket
import urllib.request
import uuid
from pathlib import Path

import pytest

import replaysafe
from support import Receiver, backfill, current, records, server


def test_a_trigger_carries_its_conf_and_the_runs_lineage(receiver: Receiver, tmp_path: Path) -> None:
    journal = tmp_path / "journal.jsonl"
    trigger = replaysafe.TriggerClient(url=receiver.url, allow_hosts=["127.0.0.1"], journal=journal)
    out = trigger.send(current(), name="rebuild_reports", conf={"source": "orders"})
    assert out.decision == "delivered", out
    [(_, _, body)] = receiver.requests
    sent = json.loads(body)
    assert sent["trigger"] == "rebuild_reports" and sent["pipeline"] == "daily_orders"
    assert sent["conf"]["source"] == "orders"
    upstream = sent["conf"]["replaysafe"]["upstream"]
    assert upstream[0]["run_id"] == "scheduled__2026-12-01T00:00:00+00:00"
    assert trigger.send(backfill(), name="rebuild_reports").decision == "suppressed"
    assert len(receiver.requests) == 1
    with pytest.raises(replaysafe.ConfigError, match="TriggerClient"):
        replaysafe.TriggerClient(journal=journal)


def test_an_alert_reaches_the_real_alertmanager_only_from_a_current_run(tmp_path: Path) -> None:
    base = server("REPLAYSAFE_TEST_ALERTMANAGER_URL")
    journal = tmp_path / "journal.jsonl"
    alerts = replaysafe.AlertClient("alertmanager", url=base, allow_hosts=["127.0.0.1"], journal=journal)
    name = f"py_{uuid.uuid4().hex[:10]}"
    out = alerts.send(current(), alertname=name, summary="orders are late", severity="critical",
                      labels={"team": "data"})
    assert out.decision == "delivered", out
    with urllib.request.urlopen(f"{base}/api/v2/alerts") as answer:
        fired = [a for a in json.load(answer) if a["labels"].get("alertname") == name]
    assert len(fired) == 1
    assert fired[0]["labels"]["severity"] == "critical" and fired[0]["labels"]["team"] == "data"
    late = alerts.send(backfill(), alertname=name + "_bf", summary="old")
    assert late.decision == "suppressed"
    with pytest.raises(replaysafe.ConfigError, match="severity"):
        alerts.send(current(), alertname=name, severity="loud")
    with pytest.raises(replaysafe.ConfigError, match="kind"):
        replaysafe.AlertClient("pager", journal=journal)


def test_a_slack_message_goes_to_the_url_the_variable_holds(
    receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLACK_WEBHOOK_URL", receiver.url)
    slack = replaysafe.AlertClient("slack", url_env="SLACK_WEBHOOK_URL", allow_hosts=["127.0.0.1"],
                                   journal=tmp_path / "journal.jsonl")
    out = slack.send(current(), alertname="orders_late", text="orders are 3 h late")
    assert out.decision == "delivered", out
    [(_, _, body)] = receiver.requests
    assert "orders are 3 h late" in json.loads(body)["text"]
    assert receiver.url not in repr(out) + str(out.error)
    # A severity no alert has is refused for Slack too, before anything is sent.
    with pytest.raises(replaysafe.ConfigError, match="AlertClient.send: severity"):
        slack.send(current(), alertname="orders_late", text="late", severity="loud")
    assert len(receiver.requests) == 1


def test_metrics_reach_the_real_pushgateway_and_statsd(tmp_path: Path) -> None:
    base = server("REPLAYSAFE_TEST_PUSHGATEWAY_URL")
    journal = tmp_path / "journal.jsonl"
    job = f"py_{uuid.uuid4().hex[:10]}"
    push = replaysafe.MetricClient("pushgateway", url=base, allow_hosts=["127.0.0.1"], journal=journal)
    [out] = push.send(current(), metrics={"orders_exported": 1204}, job=job)
    assert out.decision == "delivered", out
    with urllib.request.urlopen(f"{base}/metrics") as answer:
        exposed = answer.read().decode()
    assert any(f'job="{job}"' in line and line.startswith("orders_exported") for line in exposed.splitlines())
    [late] = push.send(backfill(), metrics={"orders_exported": 1}, job=job + "_bf")
    assert late.decision == "suppressed"

    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.settimeout(5)
    statsd = replaysafe.MetricClient("statsd", host="127.0.0.1", port=udp.getsockname()[1],
                                     journal=journal, ledger=False)
    outs = statsd.send(current(), metrics={"orders.sent": 3}, type="counter")
    assert [o.decision for o in outs] == ["delivered"]
    line = udp.recv(1024).decode()
    assert line.startswith("orders.sent:3|c"), line
    with pytest.raises(replaysafe.ConfigError, match="whole number"):
        statsd.send(current(), metrics={"orders.sent": 1.5}, type="counter")
    udp.close()
    assert {r["decision"] for r in records(journal)} >= {"delivered", "suppressed"}


def test_a_file_drop_reaches_the_real_sftp_server_only_from_a_current_run(tmp_path: Path) -> None:
    port = int(server("REPLAYSAFE_TEST_SSHD_PORT"))
    upload = Path(server("REPLAYSAFE_TEST_SSHD_UPLOAD"))
    journal = tmp_path / "journal.jsonl"
    drops = replaysafe.SftpClient(
        host="127.0.0.1", port=port, user=server("REPLAYSAFE_TEST_SSHD_USER"),
        key=server("REPLAYSAFE_TEST_SSHD_KEY"), known_hosts=server("REPLAYSAFE_TEST_SSHD_KNOWN_HOSTS"),
        dir=str(upload), journal=journal,
    )
    name = f"orders_{uuid.uuid4().hex[:10]}.csv"
    out = drops.send(current(), name=name, data=b"day,orders\n2026-12-01,1204\n", message_type="orders_csv")
    assert out.decision == "delivered", out
    assert (upload / name).read_bytes() == b"day,orders\n2026-12-01,1204\n"
    late_name = name.replace(".csv", "_bf.csv")
    assert drops.send(backfill(), name=late_name, data=b"old").decision == "suppressed"
    assert not (upload / late_name).exists()
    with pytest.raises(replaysafe.ConfigError, match="data"):
        drops.send(current(), name=name)
