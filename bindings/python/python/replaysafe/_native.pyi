"""Type stubs of replaysafe._native (checked against the module by mypy.stubtest in CI)."""

from __future__ import annotations

import datetime
import os
from collections.abc import Awaitable, Callable
from typing import Any, final

__version__: str
__all__ = [
    "Alert",
    "AlertClient",
    "ConfigError",
    "Context",
    "ContextError",
    "Decision",
    "DeliveryError",
    "Email",
    "EmailClient",
    "Error",
    "FileDrop",
    "Gate",
    "MetricClient",
    "Metrics",
    "Outcome",
    "POSTGRES_STAGE_SQL",
    "SQLITE_STAGE_SQL",
    "SftpClient",
    "Trigger",
    "TriggerClient",
    "Webhook",
    "WebhookClient",
    "__version__",
    "context",
    "outbox_stage_params",
    "report_json",
]

SQLITE_STAGE_SQL: str
POSTGRES_STAGE_SQL: str

class Error(Exception):
    """Every error replaysafe raises. Messages name the field or variable at fault, never a secret."""

class ContextError(Error):
    """The run's context cannot be resolved: a malformed REPLAYSAFE_* or AIRFLOW_CTX_* value."""

class ConfigError(Error):
    """A client's configuration or an effect is invalid; nothing was sent."""

class DeliveryError(Error):
    """A delivery failed (only with raise_on_failure=True), or its outcome could not be journaled."""

@final
class Context:
    @property
    def pipeline(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def run_kind(self) -> str: ...
    @property
    def is_replay(self) -> bool: ...
    @property
    def is_upstream_replay(self) -> bool: ...
    @property
    def backfill_id(self) -> str | None: ...
    @property
    def window(self) -> tuple[datetime.datetime, datetime.datetime] | None: ...
    def decide(self, kind: str, target: str = "") -> Decision: ...

@final
class Decision:
    @property
    def delivers(self) -> bool: ...
    @property
    def reasons(self) -> list[str]: ...

@final
class Outcome:
    @property
    def decision(self) -> str: ...
    @property
    def reasons(self) -> list[str]: ...
    @property
    def idempotency_key(self) -> str:
        """The key the receiver got; empty for a failed delivery (its journal record names it)."""
    @property
    def attempts(self) -> int: ...
    @property
    def error(self) -> str | None: ...
    @property
    def target(self) -> str | None: ...
    @property
    def delivered(self) -> bool: ...

@final
class WebhookClient:
    def __new__(
        cls,
        url: str | None = None,
        *,
        journal: str | os.PathLike[str] | None = None,
        ledger: bool = True,
        url_env: str | None = None,
        secret_env: str | None = None,
        headers: dict[str, str] | None = None,
        secret_headers_env: dict[str, str] | None = None,
        allow_hosts: list[str] | None = None,
    ) -> WebhookClient: ...
    def send(
        self,
        cx: Context,
        *,
        event_type: str,
        data: Any,
        raise_on_failure: bool = False,
    ) -> Outcome: ...
    def send_async(
        self,
        cx: Context,
        *,
        event_type: str,
        data: Any,
        raise_on_failure: bool = False,
    ) -> Awaitable[Outcome]: ...

@final
class EmailClient:
    def __new__(
        cls,
        smtp: str | None = None,
        *,
        journal: str | os.PathLike[str] | None = None,
        ledger: bool = True,
        starttls: bool | None = None,
        user: str | None = None,
        password_env: str | None = None,
        ca_file: str | None = None,
    ) -> EmailClient: ...
    def send(
        self,
        cx: Context,
        *,
        message_type: str,
        sender: str,
        to: list[str],
        subject: str,
        text: str,
        html: str | None = None,
        raise_on_failure: bool = False,
    ) -> list[Outcome]: ...
    def send_async(
        self,
        cx: Context,
        *,
        message_type: str,
        sender: str,
        to: list[str],
        subject: str,
        text: str,
        html: str | None = None,
        raise_on_failure: bool = False,
    ) -> Awaitable[list[Outcome]]: ...

@final
class TriggerClient:
    def __new__(
        cls,
        *,
        journal: str | os.PathLike[str] | None = None,
        ledger: bool = True,
        airflow: str | None = None,
        url: str | None = None,
        user: str | None = None,
        password_env: str | None = None,
        token_env: str | None = None,
        allow_hosts: list[str] | None = None,
    ) -> TriggerClient: ...
    def send(
        self, cx: Context, *, name: str, conf: Any = None, raise_on_failure: bool = False
    ) -> Outcome: ...
    def send_async(
        self, cx: Context, *, name: str, conf: Any = None, raise_on_failure: bool = False
    ) -> Awaitable[Outcome]: ...

@final
class SftpClient:
    def __new__(
        cls,
        *,
        journal: str | os.PathLike[str] | None = None,
        ledger: bool = True,
        host: str | None = None,
        port: int | None = None,
        user: str | None = None,
        known_hosts: str | None = None,
        dir: str | None = None,
        key: str | None = None,
        passphrase_env: str | None = None,
        password_env: str | None = None,
        overwrite: bool | None = None,
    ) -> SftpClient: ...
    def send(
        self,
        cx: Context,
        *,
        name: str,
        data: bytes | None = None,
        file: str | os.PathLike[str] | None = None,
        message_type: str = "file_drop",
        raise_on_failure: bool = False,
    ) -> Outcome: ...
    def send_async(
        self,
        cx: Context,
        *,
        name: str,
        data: bytes | None = None,
        file: str | os.PathLike[str] | None = None,
        message_type: str = "file_drop",
        raise_on_failure: bool = False,
    ) -> Awaitable[Outcome]: ...

@final
class AlertClient:
    def __new__(
        cls,
        kind: str,
        *,
        journal: str | os.PathLike[str] | None = None,
        ledger: bool = True,
        **fields: Any,
    ) -> AlertClient: ...
    def send(
        self,
        cx: Context,
        *,
        alertname: str,
        summary: str | None = None,
        severity: str = "error",
        labels: dict[str, str] | None = None,
        details: dict[str, str] | None = None,
        resolve: bool = False,
        text: str | None = None,
        raise_on_failure: bool = False,
    ) -> Outcome: ...
    def send_async(
        self,
        cx: Context,
        *,
        alertname: str,
        summary: str | None = None,
        severity: str = "error",
        labels: dict[str, str] | None = None,
        details: dict[str, str] | None = None,
        resolve: bool = False,
        text: str | None = None,
        raise_on_failure: bool = False,
    ) -> Awaitable[Outcome]: ...

@final
class MetricClient:
    def __new__(
        cls,
        kind: str,
        *,
        journal: str | os.PathLike[str] | None = None,
        ledger: bool = True,
        **fields: Any,
    ) -> MetricClient: ...
    def send(
        self,
        cx: Context,
        *,
        metrics: dict[str, float],
        type: str = ...,  # "gauge" or "counter"; default "gauge"
        job: str | None = None,
        grouping_labels: dict[str, str] | None = None,
        raise_on_failure: bool = False,
    ) -> list[Outcome]: ...
    def send_async(
        self,
        cx: Context,
        *,
        metrics: dict[str, float],
        type: str = ...,  # "gauge" or "counter"; default "gauge"
        job: str | None = None,
        grouping_labels: dict[str, str] | None = None,
        raise_on_failure: bool = False,
    ) -> Awaitable[list[Outcome]]: ...

@final
class Gate:
    """The gate around a call of your own, for one effect kind (what replaysafe.airflow
    wraps Airflow's operators with): ``send`` runs ``call(idempotency_key)`` only when
    the effect is to be delivered, once per key with the ledger on, and journals it. A call
    that raises is journaled as failed (naming only the exception's type) and the exception
    is raised again, unchanged."""

    def __new__(
        cls,
        kind: str,
        *,
        redact: str = "domain",  # "domain", "full" or "hashed": how targets are journaled
        journal: str | os.PathLike[str] | None = None,
        ledger: bool = True,
    ) -> Gate: ...
    @property
    def kind(self) -> str: ...
    def send(
        self,
        cx: Context,
        *,
        message_type: str,
        target: str,
        call: Callable[[str], object],
        payload: bytes | None = None,
        summary: str | None = None,
    ) -> Outcome: ...

@final
class Webhook:
    def __new__(cls, *, event_type: str, data: Any) -> Webhook: ...
    @property
    def event_type(self) -> str: ...

@final
class Email:
    def __new__(
        cls,
        *,
        message_type: str,
        sender: str,
        to: list[str],
        subject: str,
        text: str,
        html: str | None = None,
    ) -> Email: ...
    @property
    def message_type(self) -> str: ...

@final
class Trigger:
    def __new__(cls, *, name: str, conf: Any = None) -> Trigger: ...
    @property
    def name(self) -> str: ...

@final
class Alert:
    def __new__(
        cls,
        *,
        alertname: str,
        summary: str | None = None,
        severity: str = "error",
        labels: dict[str, str] | None = None,
        details: dict[str, str] | None = None,
        resolve: bool = False,
        text: str | None = None,
    ) -> Alert: ...
    @property
    def alertname(self) -> str: ...

@final
class Metrics:
    def __new__(
        cls,
        *,
        metrics: dict[str, float],
        type: str = ...,  # "gauge" or "counter"; default "gauge"
        job: str | None = None,
        grouping_labels: dict[str, str] | None = None,
    ) -> Metrics: ...

@final
class FileDrop:
    def __new__(
        cls,
        *,
        name: str,
        data: bytes | None = None,
        file: str | os.PathLike[str] | None = None,
        message_type: str = "file_drop",
    ) -> FileDrop: ...
    @property
    def name(self) -> str: ...

def outbox_stage_params(
    cx: Context,
    route: str,
    client: WebhookClient | EmailClient | TriggerClient | SftpClient | AlertClient | MetricClient | None,
    effect: Webhook | Email | Trigger | Alert | Metrics | FileDrop,
    source_version: int = 0,
    routes: str | None = None,
    journal: str | None = None,
    ordering_key: str | None = None,
) -> list[tuple[list[None | bool | int | str], str, str, list[str]]]: ...
def context(env: dict[str, str] | None = None) -> Context: ...
def report_json(*journals: str | os.PathLike[str], skip_invalid: bool = False) -> str: ...
