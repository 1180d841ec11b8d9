"""`replaysafe.outbox.stage` of every kind of effect, each on the route of its kind in the
worker's routes file, delivered by the installed `replaysafe outbox work` to the real
servers the Rust tests use (aiosmtpd, Alertmanager, Pushgateway, OpenSSH), a loopback
receiver (trigger URL, Slack) and a UDP socket (StatsD)."""

from __future__ import annotations

import json
import socket
import urllib.request
import uuid
from pathlib import Path

import pytest

import replaysafe
from support import Outbox, Receiver, backfill, command, current, fresh_postgres, records, server

def arrived(maildir: Path, subject: str) -> int:
    return sum(1 for p in maildir.rglob("*") if p.is_file() and subject in p.read_text(errors="replace"))


def test_an_email_stages_a_row_per_recipient_and_each_arrives_once(tmp_path: Path) -> None:
    port, maildir = server("REPLAYSAFE_TEST_SMTP_PORT"), Path(server("REPLAYSAFE_TEST_SMTP_MAILDIR"))
    outbox = Outbox(tmp_path, {"mail": {"kind": "email", "smtp": f"smtp://127.0.0.1:{port}"}})
    subject = f"orders {uuid.uuid4()}"
    email = replaysafe.Email(message_type="daily_summary", sender="reports@shop.example",
                             to=["ana@shop.example", "bo@shop.example"], subject=subject,
                             text="1204 orders")
    staged = outbox.stage_rows(current(), "mail", email)
    assert [s.status for s in staged] == ["pending", "pending"]
    assert len({s.key for s in staged}) == 2, "each recipient has a key of its own"
    # The task runs again (a retry of the same run): the same two rows, no third.
    assert [s.key for s in outbox.stage_rows(current(), "mail", email)] == [s.key for s in staged]
    assert len(outbox.statuses()) == 2

    outbox.work()
    outbox.work()
    assert arrived(maildir, subject) == 2
    assert set(outbox.statuses().values()) == {"delivered"}

    late = outbox.stage_rows(backfill(), "mail", email)
    assert [s.status for s in late] == ["suppressed", "suppressed"]
    assert all("replay_run" in s.reasons for s in late)
    outbox.work()
    assert arrived(maildir, subject) == 2


def test_a_trigger_staged_through_its_client_reaches_the_url_with_the_runs_lineage(
    receiver: Receiver, tmp_path: Path
) -> None:
    outbox = Outbox(tmp_path, {
        "reports": {"kind": "trigger", "url": receiver.url, "allow_hosts": ["127.0.0.1"]},
    })
    client = replaysafe.TriggerClient(url=receiver.url, allow_hosts=["127.0.0.1"], journal=outbox.journal)
    trigger = replaysafe.Trigger(name="rebuild_reports", conf={"source": "orders"})
    with outbox.conn:
        staged = replaysafe.outbox.stage(outbox.conn, current(), route="reports", effect=trigger,
                                         client=client)
    assert staged.status == "pending"
    # The routes file's route derives the same key as the client object's.
    assert outbox.stage(current(), "reports", trigger).key == staged.key
    outbox.work()
    [(_, headers, body)] = receiver.requests
    sent = json.loads(body)
    assert sent["trigger"] == "rebuild_reports" and sent["conf"]["source"] == "orders"
    assert sent["conf"]["replaysafe"]["upstream"][0]["run_id"] == "scheduled__2026-12-01T00:00:00+00:00"
    assert headers["idempotency-key"].strip('"') == staged.key


def test_alerts_reach_the_real_alertmanager_and_a_slack_url_only_from_a_current_run(
    receiver: Receiver, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = server("REPLAYSAFE_TEST_ALERTMANAGER_URL")
    # Staging builds the route's client as the worker does: its variables are needed here too.
    monkeypatch.setenv("PY_STAGE_SLACK_URL", receiver.url)
    outbox = Outbox(tmp_path, {
        "oncall": {"kind": "alertmanager", "url": base, "allow_hosts": ["127.0.0.1"]},
        "chat": {"kind": "slack", "url_env": "PY_STAGE_SLACK_URL", "allow_hosts": ["127.0.0.1"]},
    })
    name = f"py_staged_{uuid.uuid4().hex[:10]}"
    alert = replaysafe.Alert(alertname=name, summary="orders are late", severity="critical",
                             labels={"team": "data"})
    assert outbox.stage(current(), "oncall", alert).status == "pending"
    assert outbox.stage(backfill(), "oncall", replaysafe.Alert(alertname=name + "_bf")).status == "suppressed"
    note = replaysafe.Alert(alertname="orders_late", text="orders are 3 h late")
    assert outbox.stage(current(), "chat", note).status == "pending"
    with pytest.raises(replaysafe.ConfigError, match="text: required for Slack"):
        outbox.stage(current(), "chat", replaysafe.Alert(alertname="orders_late"))
    with pytest.raises(replaysafe.ConfigError, match="Alert: severity"):
        replaysafe.Alert(alertname=name, severity="loud")

    outbox.work(env={"PY_STAGE_SLACK_URL": receiver.url})
    with urllib.request.urlopen(f"{base}/api/v2/alerts") as answer:
        fired = [a["labels"] for a in json.load(answer) if a["labels"]["alertname"].startswith(name)]
    assert len(fired) == 1, fired
    assert (fired[0]["alertname"], fired[0]["severity"], fired[0]["team"]) == (name, "critical", "data")
    [(_, _, body)] = receiver.requests
    assert "orders are 3 h late" in json.loads(body)["text"]
    assert sorted(outbox.statuses().values()) == ["delivered", "delivered", "suppressed"]


def test_metrics_stage_one_pushgateway_group_or_one_statsd_line_each(tmp_path: Path) -> None:
    base = server("REPLAYSAFE_TEST_PUSHGATEWAY_URL")
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.settimeout(5)
    outbox = Outbox(tmp_path, {
        "gauges": {"kind": "pushgateway", "url": base, "allow_hosts": ["127.0.0.1"]},
        "counters": {"kind": "statsd", "host": "127.0.0.1", "port": udp.getsockname()[1]},
    })
    job = f"py_staged_{uuid.uuid4().hex[:10]}"
    group = replaysafe.Metrics(metrics={"orders_exported": 1204, "late_orders": 3}, job=job)
    assert len(outbox.stage_rows(current(), "gauges", group)) == 1
    counts = replaysafe.Metrics(metrics={"orders.sent": 3, "orders.late": 1}, type="counter")
    assert len(outbox.stage_rows(current(), "counters", counts)) == 2
    with pytest.raises(replaysafe.ConfigError, match="whole number"):
        outbox.stage_rows(current(), "counters",
                          replaysafe.Metrics(metrics={"a": 1, "b": 1.5}, type="counter"))
    with pytest.raises(replaysafe.ConfigError, match="job: required"):
        outbox.stage_rows(current(), "gauges", replaysafe.Metrics(metrics={"orders_exported": 1}))
    # Every row is described before any is staged or journaled: a backfill's first line
    # (suppressed, so journaled) does not reach the journal when the second is refused.
    with pytest.raises(replaysafe.ConfigError, match="route counters: invalid metric name"):
        outbox.stage_rows(backfill(), "counters", replaysafe.Metrics(metrics={"a.ok": 1, "b|bad": 2}))
    assert not outbox.journal.exists() or records(outbox.journal) == []
    assert len(outbox.statuses()) == 3, "a refused effect stages none of its rows"

    outbox.work()
    with urllib.request.urlopen(f"{base}/metrics") as answer:
        exposed = [line for line in answer.read().decode().splitlines() if f'job="{job}"' in line]
    assert {line.split("{")[0] for line in exposed} >= {"orders_exported", "late_orders"}
    received = sorted(udp.recv(1024).decode().split("|")[0] for _ in range(2))
    udp.close()
    assert received == ["orders.late:1", "orders.sent:3"]


def test_a_file_drop_of_bytes_or_of_a_file_reaches_the_real_sftp_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    upload = Path(server("REPLAYSAFE_TEST_SSHD_UPLOAD"))
    outbox = Outbox(tmp_path, {"partner_drop": {
        "kind": "sftp", "host": "127.0.0.1", "port": int(server("REPLAYSAFE_TEST_SSHD_PORT")),
        "user": server("REPLAYSAFE_TEST_SSHD_USER"), "key": server("REPLAYSAFE_TEST_SSHD_KEY"),
        "known_hosts": server("REPLAYSAFE_TEST_SSHD_KNOWN_HOSTS"), "dir": str(upload),
    }})
    tag = uuid.uuid4().hex[:10]
    in_row = replaysafe.FileDrop(name=f"orders_{tag}.csv", data=b"day,orders\n2026-12-01,1204\n",
                                 message_type="orders_csv")
    (tmp_path / "totals.csv").write_bytes(b"day,total\n2026-12-01,88412.5\n")
    # A relative path is staged as the absolute one: the worker runs elsewhere.
    monkeypatch.chdir(tmp_path)
    by_path = replaysafe.FileDrop(name=f"totals_{tag}.csv", file="totals.csv")
    monkeypatch.undo()
    assert outbox.stage(current(), "partner_drop", in_row).status == "pending"
    assert outbox.stage(current(), "partner_drop", by_path).status == "pending"
    outbox.work()
    assert (upload / f"orders_{tag}.csv").read_bytes() == b"day,orders\n2026-12-01,1204\n"
    assert (upload / f"totals_{tag}.csv").read_bytes() == b"day,total\n2026-12-01,88412.5\n"
    assert set(outbox.statuses().values()) == {"delivered"}
    with pytest.raises(replaysafe.ConfigError, match="FileDrop: give data"):
        replaysafe.FileDrop(name="x.csv")
    with pytest.raises(replaysafe.ConfigError, match="FileDrop: file"):
        replaysafe.FileDrop(name="x.csv", file=tmp_path / "missing.csv")


def test_an_effect_of_another_kind_than_the_route_is_refused_and_nothing_is_staged(
    receiver: Receiver, tmp_path: Path
) -> None:
    outbox = Outbox(tmp_path, {
        "mail": {"kind": "email", "smtp": "smtp://127.0.0.1:25"},
        "partner": {"kind": "webhook", "url": receiver.url, "allow_hosts": ["127.0.0.1"]},
    })
    webhook = replaysafe.Webhook(event_type="orders.published", data={"orders": 1})
    with pytest.raises(replaysafe.ConfigError,
                       match="route mail is an email route: stage a replaysafe.Email on it, not a Webhook"):
        outbox.stage(backfill(), "mail", webhook)
    with pytest.raises(replaysafe.ConfigError,
                       match="route partner is a webhook route: stage a replaysafe.Webhook on it, not a Trigger"):
        outbox.stage(current(), "partner", replaysafe.Trigger(name="rebuild"))
    with outbox.conn, pytest.raises(TypeError, match="effect: a replaysafe.Webhook, Email"):
        replaysafe.outbox.stage(outbox.conn, current(), route="partner", routes=outbox.routes,
                                effect={"event_type": "x"})  # type: ignore[call-overload]
    with outbox.conn, pytest.raises(TypeError, match="client: a replaysafe client"):
        replaysafe.outbox.stage(outbox.conn, current(), route="partner", effect=webhook,
                                client=object())  # type: ignore[call-overload]
    with pytest.raises(replaysafe.ConfigError, match="Email: to: no recipient"):
        replaysafe.Email(message_type="m", sender="a@shop.example", to=[], subject="s", text="t")
    with pytest.raises(replaysafe.ConfigError, match="Metrics: metrics: none given"):
        replaysafe.Metrics(metrics={})
    assert outbox.statuses() == {}
    assert not outbox.journal.exists() or records(outbox.journal) == [], "a refused backfill journals nothing"


def test_a_psycopg_transaction_stages_every_recipients_row_or_none(tmp_path: Path) -> None:
    psycopg, url, password = fresh_postgres("py_outbox_kinds")
    url = url.replace("@", f":{password}@", 1)
    command("outbox", "init", "--database", url)
    routes = tmp_path / "routes.json"
    routes.write_text(json.dumps({"routes": {"mail": {"kind": "email", "smtp": "smtp://127.0.0.1:25"}}}))
    journal = tmp_path / "journal.jsonl"
    email = replaysafe.Email(message_type="daily_summary", sender="reports@shop.example",
                             to=["ana@shop.example", "bo@shop.example", "cy@shop.example"],
                             subject="Orders", text="1204 orders")
    with psycopg.connect(url) as conn:
        with pytest.raises(RuntimeError):
            with conn.transaction():
                replaysafe.outbox.stage(conn, current(), route="mail", effect=email, routes=routes,
                                        journal=journal)
                raise RuntimeError("the task failed after staging")
        assert conn.execute("SELECT COUNT(*) FROM replaysafe_outbox").fetchone() == (0,)
        with conn.transaction():
            staged = replaysafe.outbox.stage(conn, current(), route="mail", effect=email,
                                             routes=routes, journal=journal, ordering_key="account-7")
        assert [s.status for s in staged] == ["pending"] * 3
        placed = conn.execute("SELECT idempotency_key FROM replaysafe_outbox ORDER BY ordering_seq").fetchall()
        assert [key for (key,) in placed] == [s.key for s in staged]
