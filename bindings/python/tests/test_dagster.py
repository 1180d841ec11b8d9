"""replaysafe under Dagster Pipes, on the Python side: the context a Pipes process gets and
the extras helper (the real Dagster runs them in `cargo xtask dagster`)."""

from __future__ import annotations

import base64
import datetime as dt
import json
import zlib
from types import SimpleNamespace

import pytest

import replaysafe
import replaysafe.dagster


def pipes(data: dict[str, object]) -> str:
    """`DAGSTER_PIPES_CONTEXT` as Dagster's Pipes clients encode it."""
    return base64.b64encode(zlib.compress(json.dumps({"data": data}).encode())).decode()


def partition(extras: dict[str, object]) -> dict[str, str]:
    today = dt.datetime.now(dt.timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
    start = today - dt.timedelta(days=1)
    return {
        "DAGSTER_PIPES_CONTEXT": pipes({
            "run_id": "run-1", "job_name": "__ASSET_JOB", "retry_number": 0,
            "asset_keys": ["daily_orders"],
            "partition_time_window": {"start": start.isoformat(), "end": today.isoformat()},
            "extras": extras,
        }),
        "REPLAYSAFE_MAX_AGE": "webhook=2d",
    }


def test_a_pipes_context_is_the_runs_context() -> None:
    latest = replaysafe.context(env=partition({}))
    assert (latest.pipeline, latest.run_id, latest.run_kind) == ("daily_orders", "run-1", "scheduled")
    assert latest.decide("webhook").delivers
    backfill = replaysafe.context(env=partition({"dagster/backfill": "bkf_1"}))
    assert backfill.backfill_id == "bkf_1"
    assert "replay_run" in backfill.decide("webhook").reasons
    with pytest.raises(replaysafe.ContextError, match="DAGSTER_PIPES_CONTEXT"):
        replaysafe.context(env={"DAGSTER_PIPES_CONTEXT": "bm90IHpsaWI="})


def test_extras_carry_the_runs_backfill_and_re_execution_tags() -> None:
    context = SimpleNamespace(run=SimpleNamespace(tags={
        "dagster/backfill": "bkf_1", "dagster/parent_run_id": "p", "team": "data",
    }))
    assert replaysafe.dagster.extras(context) == {"dagster/backfill": "bkf_1", "dagster/parent_run_id": "p"}
    assert replaysafe.dagster.extras(SimpleNamespace(run=SimpleNamespace(tags={})), note="x") == {"note": "x"}
    with pytest.raises(ValueError, match="dagster/backfill"):
        replaysafe.dagster.extras(context, **{"dagster/backfill": "other"})
