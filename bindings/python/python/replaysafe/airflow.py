"""Airflow as the platform default: every sending operator gated by replaysafe in one line.

A platform team writes, in ``airflow_local_settings.py`` on every Airflow host::

    from replaysafe.airflow import get_airflow_context_vars, task_policy

and sets ``REPLAYSAFE_JOURNAL`` (and, when it wants them, ``REPLAYSAFE_MAX_AGE``,
``REPLAYSAFE_TRUSTED_APPROVERS``, ``REPLAYSAFE_OPT_IN``) in the workers' environment.

- :func:`get_airflow_context_vars` exports what Airflow 3 does not put in a task's
  environment: the run type, the clear number, the data interval of scheduled and backfill
  runs, and lineage (the runs whose asset events or trigger caused this one). Airflow
  prefixes each key with ``AIRFLOW_CTX_``; the ``replaysafe`` command and
  ``replaysafe.context()`` read them.
- :func:`task_policy` gates Airflow's own sending operators (EmailOperator, HttpOperator,
  SlackWebhookOperator, SFTPOperator uploads, TriggerDagRunOperator) and the SmtpNotifier
  and SlackWebhookNotifier of a task's callbacks: in a replay they do not run, the effect is
  journaled as it would have been sent, and the task succeeds; in a current run they run
  once per idempotency key (a cleared task does not send again) and are journaled. A task
  with asset outlets records its run's kind and window in the asset event, so consumers
  of a backfill know it.

Every decision is the Rust core's, as for the ``replaysafe`` command.
"""

from __future__ import annotations

import contextvars
import datetime as _dt
import functools
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

import replaysafe

__all__ = ["GATED_OPERATORS", "GATED_NOTIFIERS", "get_airflow_context_vars", "task_policy"]

#: The operators the policy gates, by class name (from Airflow's providers), and the
#: effect kind each journals.
GATED_OPERATORS: Mapping[str, str] = MappingProxyType({
    "EmailOperator": "email",
    "HttpOperator": "webhook",
    "SlackWebhookOperator": "alert",
    "SFTPOperator": "file_drop",
    "TriggerDagRunOperator": "trigger",
})

#: The notifiers the policy gates in ``on_*_callback`` lists, and their effect kinds.
GATED_NOTIFIERS: Mapping[str, str] = MappingProxyType({
    "SmtpNotifier": "email",
    "SlackWebhookNotifier": "alert",
})

_CALLBACKS = (
    "on_execute_callback",
    "on_failure_callback",
    "on_success_callback",
    "on_retry_callback",
    "on_skipped_callback",
)

# Run types whose data interval is a fact about the data: a manual run's interval is
# inferred from the time it was triggered, and an asset-triggered run's from its events'
# timestamps; exporting either would move the run's window (and key) to the present.
_INTERVAL_RUN_TYPES = ("scheduled", "backfill")

# Marks what this module wrapped, so a policy applied twice wraps once.
_WRAPPED = "__replaysafe_wrapped__"


# -- the context hook ---------------------------------------------------------------------


def get_airflow_context_vars(context: Mapping[str, Any]) -> dict[str, str]:
    """Airflow's context hook: the variables replaysafe reads that Airflow 3 does not
    export. Never raises: what cannot be read is exported so that it suppresses."""
    dag_run = context.get("dag_run")
    if dag_run is None:
        return {}
    exported: dict[str, str] = {}
    run_type = _text(getattr(dag_run, "run_type", None))
    if run_type:
        exported["run_type"] = run_type
    if run_type in _INTERVAL_RUN_TYPES:
        start = getattr(dag_run, "data_interval_start", None)
        end = getattr(dag_run, "data_interval_end", None)
        if start is not None and end is not None:
            exported["data_interval_start"] = start.isoformat()
            exported["data_interval_end"] = end.isoformat()
    clear_number = getattr(dag_run, "clear_number", None)
    if isinstance(clear_number, int):
        exported["clear_number"] = str(clear_number)
    # Not in Airflow 3.3's task runtime; read when a later release gives it.
    backfill_id = getattr(dag_run, "backfill_id", None)
    if backfill_id is not None:
        exported["backfill_id"] = str(backfill_id)
    upstream = _upstream(dag_run)
    if upstream:
        exported["replaysafe_upstream"] = json.dumps(upstream, separators=(",", ":"))
    return exported


def _text(value: Any) -> str:
    """An enum's value or a string, as text; empty for None."""
    if value is None:
        return ""
    return str(getattr(value, "value", value))


def _upstream(dag_run: Any) -> list[dict[str, Any]]:
    """The runs that caused this one: the sources of its consumed asset events and the
    lineage a triggering run put in its conf. What cannot be read becomes a run of unknown
    kind, which suppresses (never an exception inside Airflow's hook)."""
    runs: list[dict[str, Any]] = []
    try:
        for event in getattr(dag_run, "consumed_asset_events", None) or []:
            runs.append(_event_source(event))
        conf = getattr(dag_run, "conf", None) or {}
        lineage = conf.get("replaysafe") if isinstance(conf, Mapping) else None
        if lineage is not None:
            listed = lineage.get("upstream") if isinstance(lineage, Mapping) else None
            if not isinstance(listed, list):
                raise ValueError("conf.replaysafe.upstream is not a list")
            runs.extend(_checked_upstream(run) for run in listed)
    except Exception as error:  # noqa: BLE001 (a hook must not fail the task; it suppresses)
        runs.append(
            {
                "pipeline": "replaysafe.airflow",
                "run_id": f"unreadable lineage ({type(error).__name__})",
            }
        )
    return _unique(runs)


def _event_source(event: Any) -> dict[str, Any]:
    """The run that produced one consumed asset event. An event from outside any DAG run
    (posted through the API) has no run to vouch for it: its kind stays unknown."""
    source_dag = getattr(event, "source_dag_id", None)
    source_run = getattr(event, "source_run_id", None)
    if not source_dag or not source_run:
        asset = getattr(getattr(event, "asset", None), "name", None) or "asset"
        stamp = getattr(event, "timestamp", None)
        return {
            "pipeline": f"asset:{asset}",
            "run_id": f"event at {stamp.isoformat() if stamp else 'an unknown time'}",
        }
    run: dict[str, Any] = {"pipeline": source_dag, "run_id": source_run}
    recorded = (getattr(event, "extra", None) or {}).get("replaysafe")
    if isinstance(recorded, Mapping):
        run.update({k: v for k, v in recorded.items() if k not in ("pipeline", "run_id")})
    return _checked_upstream(run)


_UPSTREAM_TEXT = ("pipeline", "run_id", "run_kind", "window_start", "window_end", "logical_date")
_RUN_KINDS = ("scheduled", "manual", "retry", "resume", "replay", "backfill", "rebuild", "unknown")


def _checked_upstream(run: Any) -> dict[str, Any]:
    """One upstream run in the form the core reads, or ValueError (which the hook turns into
    a run of unknown kind): a pipeline and a run id; a known kind; RFC 3339 times; a
    replay flag; nothing else."""
    if not isinstance(run, Mapping):
        raise ValueError("an upstream run is not an object")
    unknown = set(run) - set(_UPSTREAM_TEXT) - {"replay"}
    if unknown:
        raise ValueError("an upstream run has fields the core does not read")
    for field in _UPSTREAM_TEXT:
        if field in run and not isinstance(run[field], str):
            raise ValueError(f"upstream {field} is not text")
    if not run.get("pipeline") or not run.get("run_id"):
        raise ValueError("an upstream run names no pipeline or run id")
    if "run_kind" in run and run["run_kind"] not in _RUN_KINDS:
        raise ValueError("upstream run_kind is not a run kind")
    if "replay" in run and not isinstance(run["replay"], bool):
        raise ValueError("upstream replay is not true or false")
    for field in ("window_start", "window_end", "logical_date"):
        if field in run:
            _dt.datetime.fromisoformat(run[field])  # ValueError when not a time
    if ("window_start" in run) != ("window_end" in run):
        raise ValueError("an upstream window needs both ends")
    return dict(run)


def _unique(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    seen: set[str] = set()
    kept = []
    for run in runs:
        text = json.dumps(run, sort_keys=True)
        if text not in seen:
            seen.add(text)
            kept.append(run)
    return kept


def _airflow_env(context: Mapping[str, Any]) -> dict[str, str]:
    """The ``AIRFLOW_CTX_*`` variables of a task context, as Airflow would export them."""
    env: dict[str, str] = {}
    ti = context.get("ti") or context.get("task_instance")
    dag_run = context.get("dag_run")
    if ti is not None:
        env["AIRFLOW_CTX_DAG_ID"] = str(ti.dag_id)
        try_number = getattr(ti, "try_number", None)
        if try_number:
            env["AIRFLOW_CTX_TRY_NUMBER"] = str(try_number)
    if dag_run is not None:
        env["AIRFLOW_CTX_DAG_RUN_ID"] = str(dag_run.run_id)
        logical_date = getattr(dag_run, "logical_date", None)
        if logical_date is not None:
            env["AIRFLOW_CTX_LOGICAL_DATE"] = logical_date.isoformat()
    for key, value in get_airflow_context_vars(context).items():
        env["AIRFLOW_CTX_" + key.upper()] = value
    return env


def _context(context: Mapping[str, Any]) -> replaysafe.Context:
    """The run's replaysafe context: the workers' ``REPLAYSAFE_*`` variables and the task
    context's Airflow facts (which a callback's process may not have exported)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("AIRFLOW_CTX_")}
    env.update(_airflow_env(context))
    return replaysafe.context(env=env)


# -- the cluster policy ---------------------------------------------------------------------


def task_policy(task: Any) -> None:
    """Airflow's cluster policy: gates the task's sending operator and notifiers, and makes
    a task with asset outlets record its run's kind and window in the asset events."""
    kind = _gated_kind(task, GATED_OPERATORS)
    if kind is not None:
        _wrap_execute(task, kind)
    elif _asset_outlets(task):
        _wrap_outlets_only(task)
    for name in _CALLBACKS:
        callbacks = getattr(task, name, None)
        if callbacks is None:
            continue
        listed = callbacks if isinstance(callbacks, list) else [callbacks]
        replaced = []
        for callback in listed:
            notifier_kind = _gated_kind(callback, GATED_NOTIFIERS)
            if notifier_kind is not None:
                _wrap_notifier(callback, notifier_kind)
                callback = _InCallback(callback, name)
            replaced.append(callback)
        # A new list: one shared by several tasks (default_args) is left as it was.
        setattr(task, name, replaced if isinstance(callbacks, list) else replaced[0])


def _gated_kind(thing: Any, known: Mapping[str, str]) -> str | None:
    """The effect kind of a provider class (or subclass) the policy knows, else None."""
    for cls in type(thing).__mro__:
        if cls.__name__ in known and cls.__module__.startswith("airflow.providers."):
            return known[cls.__name__]
    return None


def _asset_outlets(task: Any) -> list[Any]:
    """The task's outlets that are assets (subclasses such as Dataset and Model too)."""
    return [
        outlet
        for outlet in getattr(task, "outlets", None) or []
        if any(cls.__name__ == "Asset" for cls in type(outlet).__mro__)
    ]


_gates: dict[tuple[str, str], replaysafe.Gate] = {}


def _gate(kind: str) -> replaysafe.Gate:
    """One gate per effect kind and journal, for the life of the task process."""
    journal = os.environ.get("REPLAYSAFE_JOURNAL", "")
    redact = "full" if kind == "trigger" else "domain"
    gate = _gates.get((kind, journal))
    if gate is None:
        gate = replaysafe.Gate(kind, redact=redact)
        _gates[(kind, journal)] = gate
    return gate


def _message_type(task: Any, context: Mapping[str, Any], suffix: str = "") -> str:
    """The task id (with the map index of a mapped task): what the effect is, per DAG.
    ``task`` is the task or its id."""
    name = task if isinstance(task, str) else str(task.task_id)
    ti = context.get("ti")
    map_index = getattr(ti, "map_index", -1) if ti is not None else -1
    if isinstance(map_index, int) and map_index >= 0:
        name += f"[{map_index}]"
    return name + suffix


def _runtime_execute(task: Any, context: Mapping[str, Any]) -> tuple[Any, Callable[[Any], Any]]:
    """The task Airflow runs (its task runner executes a prepared copy of the parsed task,
    with the templates rendered) and that task's own ``execute``."""
    runtime = context.get("task") or task
    return runtime, functools.partial(type(runtime).execute, runtime)


def _is_wrapped(task: Any) -> bool:
    return bool(getattr(getattr(task, "__dict__", {}).get("execute"), _WRAPPED, False))


def _wrap_execute(task: Any, kind: str) -> None:
    if _is_wrapped(task):
        return
    describe = _DESCRIBE[kind]

    def execute(context: Any) -> Any:
        runtime, original = _runtime_execute(task, context)
        cx = _context(context)
        if kind == "file_drop" and _text(runtime.operation).lower() != "put":
            result = original(context)  # a download sends nothing
            _record_outlets(runtime, context, cx)
            return result
        if kind == "trigger":
            _prepare_trigger(runtime, cx)
        target, summary, payload = describe(runtime, context)
        result: list[Any] = []
        handed_on: list[BaseException] = []
        # The call may run on another thread: it keeps the task runner's context variables.
        current = contextvars.copy_context()

        def call(key: str) -> None:
            if kind == "trigger" and not getattr(runtime, "trigger_run_id", None):
                # The run's id carries the key: Airflow itself refuses a second run of it.
                runtime.trigger_run_id = f"manual__replaysafe-{key}"
            if kind == "webhook":
                # The receiver can drop a repeat (a retry after a failed response check).
                runtime.headers = {**(getattr(runtime, "headers", None) or {}), "Idempotency-Key": key}
            try:
                result.append(current.run(original, context))
            except BaseException as raised:
                # Airflow 3 hands some sends to its own machinery by raising: the trigger of a
                # DAG run (DagRunTriggerException, which the task runner carries out) and a
                # deferred request (TaskDeferred, which the triggerer sends). That is the
                # delivery, handed on once the gate journaled it.
                if type(raised).__name__ in ("DagRunTriggerException", "TaskDeferred"):
                    handed_on.append(raised)
                    return
                raise

        outcome = _gate(kind).send(
            cx,
            message_type=_message_type(runtime, context),
            target=target,
            call=call,
            payload=payload,
            summary=summary,
        )
        _log(runtime, outcome, kind)
        # After the operator ran: its own writes to an event's extra are kept, and the
        # record is the run's whatever they said.
        _record_outlets(runtime, context, cx)
        if handed_on:
            raise handed_on[0]
        return result[0] if result else None

    setattr(execute, _WRAPPED, True)
    task.execute = execute


def _wrap_outlets_only(task: Any) -> None:
    if _is_wrapped(task):
        return

    def execute(context: Any) -> Any:
        runtime, original = _runtime_execute(task, context)
        try:
            cx = _context(context)
        except replaysafe.Error:
            cx = None  # the consumer then sees no kind and no window: it suppresses
        result = original(context)
        # After the operator ran, so its own writes to an event's extra do not erase it.
        _record_outlets(runtime, context, cx)
        return result

    setattr(execute, _WRAPPED, True)
    task.execute = execute


def _record_outlets(task: Any, context: Mapping[str, Any], cx: replaysafe.Context | None) -> None:
    """Writes the run's kind and window into each asset event the task emits."""
    outlets = _asset_outlets(task)
    events = context.get("outlet_events")
    if not outlets or events is None or cx is None:
        return
    record = _lineage_of(cx)
    del record["pipeline"], record["run_id"]  # the event names its source run itself
    for outlet in outlets:
        event = events[outlet]
        event.extra = {**(event.extra or {}), "replaysafe": record}


def _lineage_of(cx: replaysafe.Context) -> dict[str, Any]:
    """This run as a downstream run's upstream (the JSON ``REPLAYSAFE_UPSTREAM`` takes). A
    run that a replay caused is a replay to its own downstream runs too, however many hops
    away (even when an approval let this run deliver: the next DAG needs its own)."""
    run: dict[str, Any] = {"pipeline": cx.pipeline, "run_id": cx.run_id, "run_kind": cx.run_kind}
    if cx.is_replay or cx.is_upstream_replay:
        run["replay"] = True
    if cx.window is not None:
        run["window_start"] = cx.window[0].isoformat()
        run["window_end"] = cx.window[1].isoformat()
    return run


def _trigger_conf(task: Any) -> dict[str, Any]:
    """A TriggerDagRunOperator's conf as a dict (the operator takes a JSON string too)."""
    conf = getattr(task, "conf", None) or {}
    if isinstance(conf, str):
        conf = json.loads(conf)
    return dict(conf)


def _prepare_trigger(task: Any, cx: replaysafe.Context) -> None:
    """Puts this run's lineage into the conf of the run the operator starts."""
    conf = _trigger_conf(task)
    section = dict(conf.get("replaysafe") or {})
    section["upstream"] = [_lineage_of(cx)]
    conf["replaysafe"] = section
    task.conf = conf


# The callback a gated notifier runs in, set by the wrapper the policy puts in the task's
# callback list (one notifier object may be shared by many tasks and callbacks).
_CALLBACK: contextvars.ContextVar[str] = contextvars.ContextVar("replaysafe_callback", default="callback")


class _InCallback:
    """A notifier as an entry of a task's callback list: runs it with the callback's name
    known to its gate."""

    def __init__(self, notifier: Any, callback: str) -> None:
        self.notifier = notifier
        self.callback = callback

    def __call__(self, *args: Any) -> Any:
        token = _CALLBACK.set(self.callback)
        try:
            return self.notifier(*args)
        finally:
            _CALLBACK.reset(token)


def _wrap_notifier(notifier: Any, kind: str) -> None:
    """Gates the notifier's ``notify`` (which Airflow calls once its templates are rendered),
    keyed by the task that runs the callback and the callback's name, both read at the call."""
    original = notifier.notify
    if getattr(original, _WRAPPED, False):
        return
    describe = _DESCRIBE_NOTIFIER[kind]

    def notify(context: Any) -> None:
        ti = context.get("ti") or context.get("task_instance")
        task_id = str(getattr(ti, "task_id", None) or getattr(context.get("task"), "task_id", "task"))
        cx = _context(context)
        target, summary, payload = describe(notifier, context)
        current = contextvars.copy_context()
        outcome = _gate(kind).send(
            cx,
            message_type=_message_type(task_id, context, "." + _CALLBACK.get()),
            target=target,
            call=lambda key: current.run(original, context),
            payload=payload,
            summary=summary,
        )
        _log(notifier, outcome, kind)

    setattr(notify, _WRAPPED, True)
    notifier.notify = notify


def _log(owner: Any, outcome: replaysafe.Outcome, kind: str) -> None:
    log = getattr(owner, "log", None)
    if log is None:
        return
    if outcome.decision == "suppressed":
        log.info(
            "replaysafe: %s suppressed (%s); the journal shows what would have been sent",
            kind,
            ", ".join(outcome.reasons),
        )
    else:
        log.info("replaysafe: %s %s (key %s)", kind, outcome.decision, outcome.idempotency_key)


# -- what each operator sends ---------------------------------------------------------------

Described = tuple[str, str | None, bytes]


def _addresses(*fields: Any) -> list[str]:
    found: list[str] = []
    for value in fields:
        if value is None:
            continue
        items: Iterable[Any] = value.replace(";", ",").split(",") if isinstance(value, str) else value
        found.extend(str(item).strip() for item in items if str(item).strip())
    return sorted(set(found))


def _email(task: Any, context: Mapping[str, Any]) -> Described:
    to = _addresses(task.to, getattr(task, "cc", None), getattr(task, "bcc", None))
    subject = str(getattr(task, "subject", "") or "")
    body = str(getattr(task, "html_content", "") or "")
    return ",".join(to) or "no recipient", subject, (subject + "\n" + body).encode()


def _connection_target(conn_id: str, path: str) -> str:
    """The connection's name and the path: what the effect goes to, the same however and
    whenever the connection reads (its host or password may change, its name does not);
    the journal shows `airflow-conn://CONN_ID`."""
    return f"airflow-conn://{conn_id}/{path.lstrip('/')}"


def _without_query(path: str) -> str:
    return path.split("?", 1)[0].split("#", 1)[0]


def _http(task: Any, context: Mapping[str, Any]) -> Described:
    endpoint = str(task.endpoint or "")
    target = _connection_target(task.http_conn_id, endpoint)
    data = task.data
    payload = data if isinstance(data, bytes) else json.dumps(data, sort_keys=True, default=str).encode()
    # The summary is journaled: the endpoint's query (a token, maybe) is not.
    return target, f"{task.method} /{_without_query(endpoint).lstrip('/')}", payload


def _slack(task: Any, context: Mapping[str, Any]) -> Described:
    # The webhook URL is a secret: the target is the connection's name. An operator has
    # `message`, a notifier `text`.
    conn_id = getattr(task, "slack_webhook_conn_id", None) or "slack_default"
    text = str(getattr(task, "message", None) or getattr(task, "text", None) or "")
    return f"airflow-conn://{conn_id}", text, text.encode()


def _sftp(task: Any, context: Mapping[str, Any]) -> Described:
    remote = task.remote_filepath
    remote_paths = remote if isinstance(remote, list) else [remote]
    local = task.local_filepath
    local_paths = local if isinstance(local, list) else [local] if local else []
    operation = _text(task.operation).lower()
    host = getattr(task, "remote_host", None)
    conn_id = getattr(task, "ssh_conn_id", None) or "sftp_default"
    target = ",".join(
        (f"sftp://{host}/{str(path).lstrip('/')}" if host else _connection_target(conn_id, str(path)))
        for path in remote_paths
    )
    # The files' digest, read a block at a time (a file drop can be large).
    digest = hashlib.sha256()
    for path in local_paths:
        try:
            with open(path, "rb") as file:
                for block in iter(lambda: file.read(1 << 20), b""):
                    digest.update(block)
        except OSError:
            digest.update(str(path).encode())
    names = ", ".join(os.path.basename(str(path)) for path in remote_paths)
    return target, f"{operation} {names}", digest.digest()


def _trigger(task: Any, context: Mapping[str, Any]) -> Described:
    dag_id = str(task.trigger_dag_id)
    conf = _trigger_conf(task)
    return dag_id, f"trigger {dag_id}", json.dumps(conf, sort_keys=True, default=str).encode()


_DESCRIBE: Mapping[str, Callable[[Any, Mapping[str, Any]], Described]] = MappingProxyType({
    "email": _email,
    "webhook": _http,
    "alert": _slack,
    "file_drop": _sftp,
    "trigger": _trigger,
})


# A notifier has the fields its operator has: SmtpNotifier an EmailOperator's, and
# SlackWebhookNotifier a SlackWebhookOperator's (`text` for `message`).
_DESCRIBE_NOTIFIER: Mapping[str, Callable[[Any, Mapping[str, Any]], Described]] = MappingProxyType({
    "email": _email,
    "alert": _slack,
})
