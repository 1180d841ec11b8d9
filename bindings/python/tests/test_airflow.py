"""replaysafe.airflow's logic on task contexts shaped as Airflow 3's task runtime gives
them (plain objects here; the real Airflow runs them in `cargo xtask airflow`)."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import replaysafe
from replaysafe import airflow

NOW = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
TODAY = NOW.replace(hour=0, minute=0, second=0)


def dag_run(run_type: str, run_id: str, **fields: Any) -> SimpleNamespace:
    values: dict[str, Any] = {
        "run_id": run_id,
        "run_type": run_type,
        "logical_date": None,
        "data_interval_start": None,
        "data_interval_end": None,
        "clear_number": 0,
        "conf": {},
        "consumed_asset_events": [],
    }
    values.update(fields)
    return SimpleNamespace(**values)


def context(run: SimpleNamespace, dag_id: str = "consumer", try_number: int = 1) -> dict[str, Any]:
    ti = SimpleNamespace(dag_id=dag_id, task_id="notify", try_number=try_number, map_index=-1)
    return {"dag_run": run, "ti": ti}


def event(source_dag: str | None, source_run: str | None, extra: dict[str, Any] | None = None) -> SimpleNamespace:
    return SimpleNamespace(
        source_dag_id=source_dag,
        source_run_id=source_run,
        extra=extra or {},
        asset=SimpleNamespace(name="orders"),
        timestamp=NOW,
    )


def resolved(ctx: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> replaysafe.Context:
    for key in list(__import__("os").environ):
        if key.startswith(("REPLAYSAFE_", "AIRFLOW_CTX_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("REPLAYSAFE_JOURNAL", str(tmp_path / "journal.jsonl"))
    return airflow._context(ctx)


def test_a_scheduled_run_exports_its_interval_and_a_manual_run_keeps_its_logical_date(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    scheduled = dag_run(
        "scheduled", "scheduled__x", logical_date=TODAY,
        data_interval_start=TODAY - dt.timedelta(days=1), data_interval_end=TODAY,
    )
    exported = airflow.get_airflow_context_vars({"dag_run": scheduled})
    assert exported["run_type"] == "scheduled"
    assert exported["data_interval_end"] == TODAY.isoformat()
    assert exported["clear_number"] == "0"
    # A manual run for a past date: Airflow infers an interval from when it was
    # triggered; exporting it would move the window to the present. It keeps its date.
    past = TODAY - dt.timedelta(days=10)
    manual = dag_run(
        "manual", "manual__y", logical_date=past,
        data_interval_start=NOW, data_interval_end=NOW,
    )
    exported = airflow.get_airflow_context_vars({"dag_run": manual})
    assert "data_interval_start" not in exported and "data_interval_end" not in exported
    cx = resolved(context(manual), monkeypatch, tmp_path)
    assert cx.window == (past, past)
    assert cx.run_kind == "manual"


def test_a_consumer_of_a_backfill_suppresses_and_of_a_current_run_takes_its_window(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    end = NOW - dt.timedelta(minutes=5)
    window = {"run_kind": "scheduled", "window_start": (end - dt.timedelta(hours=1)).isoformat(),
              "window_end": end.isoformat()}
    fresh = dag_run(
        "asset_triggered", "asset_triggered__z",
        consumed_asset_events=[event("producer", "scheduled__a", {"replaysafe": window})],
    )
    exported = airflow.get_airflow_context_vars({"dag_run": fresh})
    upstream = json.loads(exported["replaysafe_upstream"])
    assert upstream == [{"pipeline": "producer", "run_id": "scheduled__a", **window}]
    cx = resolved(context(fresh), monkeypatch, tmp_path)
    assert cx.window == (end - dt.timedelta(hours=1), end)
    assert cx.decide("webhook").delivers

    replayed = dag_run(
        "asset_triggered", "asset_triggered__w",
        consumed_asset_events=[event("producer", "backfill__b", {"replaysafe": {**window, "run_kind": "backfill"}})],
    )
    decision = resolved(context(replayed), monkeypatch, tmp_path).decide("webhook")
    assert not decision.delivers and "upstream_replay" in decision.reasons

    # Without the producer's record, a backfill's run id alone still suppresses; an event
    # from outside any DAG run (the REST API) has no kind: it suppresses too.
    bare = dag_run("asset_triggered", "asset_triggered__v", consumed_asset_events=[event("producer", "backfill__c")])
    assert "upstream_replay" in resolved(context(bare), monkeypatch, tmp_path).decide("webhook").reasons
    outside = dag_run("asset_triggered", "asset_triggered__u", consumed_asset_events=[event(None, None)])
    assert not resolved(context(outside), monkeypatch, tmp_path).decide("webhook").delivers


def test_lineage_in_a_triggered_runs_conf_is_read_and_a_malformed_one_suppresses(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    conf = {"replaysafe": {"upstream": [{"pipeline": "a", "run_id": "backfill__x", "run_kind": "backfill"}]}}
    triggered = dag_run("manual", "manual__t", logical_date=NOW, conf=conf)
    decision = resolved(context(triggered), monkeypatch, tmp_path).decide("email")
    assert "upstream_replay" in decision.reasons
    broken = dag_run("manual", "manual__s", logical_date=NOW, conf={"replaysafe": {"upstream": "a string"}})
    exported = airflow.get_airflow_context_vars({"dag_run": broken})
    assert "unreadable lineage" in exported["replaysafe_upstream"]
    assert not resolved(context(broken), monkeypatch, tmp_path).decide("email").delivers


class EmailOperator:
    """Shaped like the provider's operator, as the policy matches it by class."""

    def __init__(self) -> None:
        self.task_id = "email"
        self.to = ["ana@shop.example", "ben@shop.example"]
        self.subject = "Daily orders"
        self.html_content = "<p>orders</p>"
        self.outlets: list[Any] = []
        self.sent = 0

    def execute(self, context: Any) -> str:
        self.sent += 1
        return "sent"


EmailOperator.__module__ = "airflow.providers.smtp.operators.smtp"


def test_the_policy_gates_a_known_operator_and_leaves_others_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    resolved(context(dag_run("scheduled", "x")), monkeypatch, tmp_path)  # sets the journal
    operator = EmailOperator()
    airflow.task_policy(operator)
    airflow.task_policy(operator)  # applied twice, wrapped once
    run = dag_run("scheduled", "scheduled__t", logical_date=NOW - dt.timedelta(minutes=5))
    assert operator.execute(context(run, "orders")) == "sent"
    assert operator.execute(context(run, "orders", try_number=2)) is None  # cleared: the ledger
    assert operator.sent == 1
    backfill = dag_run("backfill", "backfill__b", logical_date=TODAY - dt.timedelta(days=3))
    assert operator.execute(context(backfill, "orders")) is None
    assert operator.sent == 1
    text = (tmp_path / "journal.jsonl").read_text()
    assert "ana@" not in text and "*@shop.example" in text

    class BashOperator:
        task_id = "bash"
        outlets: list[Any] = []

        def execute(self, context: Any) -> str:
            return "ran"

    other = BashOperator()
    before = other.execute
    airflow.task_policy(other)
    assert other.execute == before


def test_the_policy_runs_and_describes_the_task_airflow_runs(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Airflow parses the task (where the policy wraps it), then runs a prepared copy whose
    # templates are rendered: the copy's fields are what is sent and journaled.
    import copy

    resolved(context(dag_run("scheduled", "x")), monkeypatch, tmp_path)
    parsed = EmailOperator()
    parsed.subject = "Orders {{ run_id }}"
    airflow.task_policy(parsed)
    prepared = copy.copy(parsed)
    prepared.subject = "Orders scheduled__r"
    run = dag_run("scheduled", "scheduled__r", logical_date=NOW - dt.timedelta(minutes=5))
    ctx = {**context(run, "orders"), "task": prepared}
    assert prepared.execute(ctx) == "sent"
    assert (prepared.sent, parsed.sent) == (1, 0)
    text = (tmp_path / "journal.jsonl").read_text()
    assert "Orders scheduled__r" in text and "{{ run_id }}" not in text


def test_a_consumer_of_a_backfill_passes_the_replay_on_to_its_own_consumers(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    end = NOW - dt.timedelta(minutes=5)
    window = {"window_start": (end - dt.timedelta(hours=1)).isoformat(), "window_end": end.isoformat()}
    replayed = dag_run(
        "asset_triggered", "asset_triggered__one",
        consumed_asset_events=[event("producer", "backfill__b", {"replaysafe": {**window, "run_kind": "backfill"}})],
    )
    cx = resolved(context(replayed, "consumer1"), monkeypatch, tmp_path)
    assert cx.is_upstream_replay and not cx.is_replay
    # What consumer1 records in its own asset events: a replay, two hops on.
    record = airflow._lineage_of(cx)
    assert record["replay"] is True
    second = dag_run(
        "asset_triggered", "asset_triggered__two",
        consumed_asset_events=[event("consumer1", "asset_triggered__one", {"replaysafe": record})],
    )
    decision = resolved(context(second, "consumer2"), monkeypatch, tmp_path).decide("webhook")
    assert not decision.delivers and "upstream_replay" in decision.reasons


def test_unreadable_lineage_suppresses_instead_of_failing_the_task(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for upstream in (
        [{"pipeline": "p", "run_id": "x", "foo": 1}],
        [{"pipeline": "p", "run_id": "x", "run_kind": "sideways"}],
        [{"pipeline": "p", "run_id": "x", "window_start": "yesterday", "window_end": "today"}],
        [{"pipeline": "p"}],
    ):
        run = dag_run("manual", "manual__m", logical_date=NOW, conf={"replaysafe": {"upstream": upstream}})
        cx = resolved(context(run), monkeypatch, tmp_path)  # no ContextError
        assert not cx.decide("email").delivers, upstream


class SlackWebhookNotifier:
    """Shaped like the slack provider's notifier: `__call__` renders, then `notify`."""

    def __init__(self) -> None:
        self.slack_webhook_conn_id = "alerts"
        self.text = "load failed"
        self.sent: list[str] = []

    def __call__(self, context: Any) -> None:
        self.notify(context)

    def notify(self, context: Any) -> None:
        self.sent.append(context["ti"].task_id)


SlackWebhookNotifier.__module__ = "airflow.providers.slack.notifications.slack_webhook"


def test_one_notifier_shared_by_tasks_notifies_for_each_task(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    resolved(context(dag_run("scheduled", "x")), monkeypatch, tmp_path)
    shared = SlackWebhookNotifier()
    callbacks = [shared]  # default_args hand every task the same list
    tasks = [SimpleNamespace(task_id=name, outlets=[], on_failure_callback=callbacks) for name in ("extract", "load")]
    for task in tasks:
        airflow.task_policy(task)
    assert callbacks == [shared], "the shared list is left as it was"
    run = dag_run("scheduled", "scheduled__f", logical_date=NOW - dt.timedelta(minutes=5))
    for task in tasks:
        ti = SimpleNamespace(dag_id="orders", task_id=task.task_id, try_number=1, map_index=-1)
        for callback in task.on_failure_callback:
            callback({"dag_run": run, "ti": ti})
    assert shared.sent == ["extract", "load"]
    text = (tmp_path / "journal.jsonl").read_text()
    assert "extract.on_failure_callback" in text and "load.on_failure_callback" in text


class HttpOperator:
    task_id = "post"
    http_conn_id = "partner"
    endpoint = "hooks/orders?token=s3cr3t-canary"
    method = "POST"
    data = '{"n": 1}'
    outlets: list[Any] = []

    def __init__(self) -> None:
        self.headers: dict[str, str] = {}
        self.sent: list[dict[str, str]] = []

    def execute(self, context: Any) -> None:
        self.sent.append(dict(self.headers))


HttpOperator.__module__ = "airflow.providers.http.operators.http"


def test_an_http_operator_is_keyed_by_its_connection_and_its_query_stays_out_of_the_journal(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    resolved(context(dag_run("scheduled", "x")), monkeypatch, tmp_path)
    operator = HttpOperator()
    airflow.task_policy(operator)
    run = dag_run("scheduled", "scheduled__h", logical_date=NOW - dt.timedelta(minutes=5))
    operator.execute(context(run, "orders"))
    assert len(operator.sent) == 1 and len(operator.sent[0]["Idempotency-Key"]) == 64
    text = (tmp_path / "journal.jsonl").read_text()
    assert "s3cr3t-canary" not in text
    assert "airflow-conn://partner" in text


class TriggerDagRunOperator:
    task_id = "start"
    trigger_dag_id = "report"
    outlets: list[Any] = []

    def __init__(self) -> None:
        self.trigger_run_id: str | None = None
        self.conf: Any = '{"source": "orders"}'  # the operator takes a JSON string too

    def execute(self, context: Any) -> None:
        raise DagRunTriggerException()


class DagRunTriggerException(Exception):
    pass


TriggerDagRunOperator.__module__ = "airflow.providers.standard.operators.trigger_dagrun"


def test_a_trigger_is_handed_on_with_lineage_and_a_run_id_made_of_its_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    resolved(context(dag_run("scheduled", "x")), monkeypatch, tmp_path)
    operator = TriggerDagRunOperator()
    airflow.task_policy(operator)
    run = dag_run("scheduled", "scheduled__t", logical_date=NOW - dt.timedelta(minutes=5))
    with pytest.raises(DagRunTriggerException):
        operator.execute(context(run, "orders"))
    assert operator.conf["source"] == "orders"
    assert operator.conf["replaysafe"]["upstream"][0]["run_id"] == "scheduled__t"
    run_id: Any = operator.trigger_run_id
    assert isinstance(run_id, str) and run_id.startswith("manual__replaysafe-")
    # Cleared: the ledger holds it; nothing is handed on again.
    operator.trigger_run_id = None
    operator.execute(context(run, "orders", try_number=2))  # does not raise
    assert operator.trigger_run_id is None
    assert '"decision":"delivered"' in (tmp_path / "journal.jsonl").read_text()
