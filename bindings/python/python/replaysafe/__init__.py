"""Replay-safe side effects for data pipelines, for Python tasks.

Every verdict, idempotency key and journal record comes from the Rust core that the
``replaysafe`` command runs too: nothing here decides on its own.
"""

from __future__ import annotations

import json as _json
import os as _os
from typing import Any

from replaysafe._native import (
    Alert,
    AlertClient,
    ConfigError,
    Context,
    ContextError,
    Decision,
    DeliveryError,
    Email,
    EmailClient,
    Error,
    FileDrop,
    Gate,
    MetricClient,
    Metrics,
    Outcome,
    SftpClient,
    Trigger,
    TriggerClient,
    Webhook,
    WebhookClient,
    __version__,
    context,
    report_json as _report_json,
)

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
    "SftpClient",
    "Trigger",
    "TriggerClient",
    "Webhook",
    "WebhookClient",
    "__version__",
    "context",
    "outbox",
    "report",
]

from replaysafe import outbox  # noqa: E402  (after the names it uses)


def report(*journals: str | _os.PathLike[str], skip_invalid: bool = False) -> dict[str, Any]:
    """The report of one or more JSON Lines journals, as ``replaysafe report --format json``
    gives it: headlines per run and backfill, effects in doubt, failures, opt-in deliveries,
    runs without a window."""
    report: dict[str, Any] = _json.loads(
        _report_json(*[_os.fspath(j) for j in journals], skip_invalid=skip_invalid)
    )
    return report
