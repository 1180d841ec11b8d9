"""Staging effects in the transactional outbox from Python, inside the caller's own
transaction (``sqlite3`` or ``psycopg``).

The row (its key, status, context, reasons and opt-in document) is computed by the same
Rust code that ``replaysafe_outbox::sqlite::stage`` runs: the gate decides on the real
context, never the caller. Only the statement is executed here, on the caller's
connection, so the row commits or rolls back with the caller's data.
"""

from __future__ import annotations

import os
import re as _re
import sqlite3 as _sqlite3
from dataclasses import dataclass
from collections.abc import Callable
from typing import Any, Union, overload

from replaysafe._native import (
    POSTGRES_STAGE_SQL as _POSTGRES_STAGE_SQL,
    SQLITE_STAGE_SQL as _SQLITE_STAGE_SQL,
    Alert,
    AlertClient,
    Context,
    Email,
    EmailClient,
    FileDrop,
    MetricClient,
    Metrics,
    SftpClient,
    Trigger,
    TriggerClient,
    Webhook,
    WebhookClient,
    outbox_stage_params as _stage_params,
)

__all__ = ["Alert", "Email", "FileDrop", "Metrics", "Staged", "Trigger", "Webhook", "stage"]

# psycopg's placeholders: $N becomes %(pN)s (a parameter may appear more than once).
_PSYCOPG_STAGE_SQL = _re.sub(r"\$(\d+)", r"%(p\1)s", _POSTGRES_STAGE_SQL.replace("%", "%%"))

Params = list[Union[None, bool, int, str]]
"""One row's staging statement parameters, in the statement's order."""

Client = Union[WebhookClient, EmailClient, TriggerClient, SftpClient, AlertClient, MetricClient]
"""A client object, given as ``client=`` to stage through its configuration."""


@dataclass(frozen=True)
class Staged:
    """What staging did: the row's key, the gate's status (``pending`` or ``suppressed``)
    and reasons at staging, and whether the statement inserted or changed the row."""

    key: str
    status: str
    reasons: list[str]
    changed: bool


@overload
def stage(
    conn: Any,
    cx: Context,
    *,
    route: str,
    effect: Email | Metrics,
    client: Client | None = None,
    routes: str | os.PathLike[str] | None = None,
    journal: str | os.PathLike[str] | None = None,
    source_version: int = 0,
    ordering_key: str | None = None,
) -> list[Staged]: ...


@overload
def stage(
    conn: Any,
    cx: Context,
    *,
    route: str,
    effect: Webhook | Trigger | Alert | FileDrop,
    client: Client | None = None,
    routes: str | os.PathLike[str] | None = None,
    journal: str | os.PathLike[str] | None = None,
    source_version: int = 0,
    ordering_key: str | None = None,
) -> Staged: ...


def stage(
    conn: Any,
    cx: Context,
    *,
    route: str,
    effect: Webhook | Email | Trigger | Alert | Metrics | FileDrop,
    client: Client | None = None,
    routes: str | os.PathLike[str] | None = None,
    journal: str | os.PathLike[str] | None = None,
    source_version: int = 0,
    ordering_key: str | None = None,
) -> Staged | list[Staged]:
    """Stages ``effect`` for ``route`` on ``conn``, in the caller's transaction.

    The effect's class is the route's kind: ``Webhook``, ``Email``, ``Trigger``,
    ``FileDrop`` (SFTP), ``Alert`` (Alertmanager, PagerDuty, Slack) or ``Metrics``
    (Pushgateway, StatsD); they take what the matching client's ``send`` takes. As that
    ``send`` returns one ``Outcome`` or a list, ``stage`` returns one ``Staged``, or a list
    for an ``Email`` (a row per recipient) and ``Metrics`` (one row for a Pushgateway
    group, a row per metric over StatsD). Every row is checked before any is staged.

    The route's client is the one the worker delivers with, so that staging derives the
    key the worker will: by default ``route`` of the worker's routes file (``routes=`` or
    ``REPLAYSAFE_OUTBOX_ROUTES``, journaling a suppression to ``journal=`` or
    ``REPLAYSAFE_JOURNAL``), or ``client`` when given (the routes file must then hold the
    same configuration under that name). A replay's effect becomes a ``suppressed`` row,
    journaled "would have sent" now; a current run's a ``pending`` row a worker delivers.

    Rows staged with one ``ordering_key`` are delivered one at a time, in the order they
    were first staged (``docs/reference/outbox.md``, "Ordering keys"); on PostgreSQL,
    staging a keyed row holds its key until the transaction ends. A malformed key (empty,
    over 200 bytes, a control character) raises ``ConfigError`` and stages nothing."""
    # The connection is checked before the gate runs, which journals a suppression.
    execute = _statement_runner(conn)
    rows = _stage_params(
        cx,
        route,
        client,
        effect,
        source_version,
        routes=None if routes is None else os.fspath(routes),
        journal=None if journal is None else os.fspath(journal),
        ordering_key=ordering_key,
    )
    staged = [
        Staged(key=key, status=status, reasons=list(reasons), changed=execute(params) > 0)
        for params, key, status, reasons in rows
    ]
    if isinstance(effect, (Email, Metrics)):
        return staged
    [one] = staged
    return one


def _statement_runner(conn: Any) -> Callable[[Params], int]:
    """What runs the staging statement on ``conn``, returning its row count."""
    if isinstance(conn, _sqlite3.Connection):

        def on_sqlite(params: Params) -> int:
            return int(conn.execute(_SQLITE_STAGE_SQL, params).rowcount)

        return on_sqlite
    if type(conn).__module__.split(".")[0] == "psycopg":  # psycopg 3, not psycopg2

        def on_psycopg(params: Params) -> int:
            named = {f"p{index}": value for index, value in enumerate(params, start=1)}
            return int(conn.execute(_PSYCOPG_STAGE_SQL, named).rowcount)

        return on_psycopg
    raise TypeError(
        f"conn: a sqlite3.Connection or a psycopg (3) Connection, not "
        f"{type(conn).__module__}.{type(conn).__name__}"
    )
