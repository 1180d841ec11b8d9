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
    latest = replaysafe.context(env=partition({"dagster/backfill": None}))
    assert (latest.pipeline, latest.run_id, latest.run_kind) == ("daily_orders", "run-1", "scheduled")
    assert latest.decide("webhook").delivers
    backfill = replaysafe.context(env=partition({"dagster/backfill": "bkf_1"}))
    assert backfill.backfill_id == "bkf_1"
    assert "replay_run" in backfill.decide("webhook").reasons
    # Extras that do not say whether the run is a backfill's: unknown, suppressed.
    untold = replaysafe.context(env=partition({}))
    assert untold.run_kind == "unknown" and not untold.decide("webhook").delivers
    with pytest.raises(replaysafe.ContextError, match="DAGSTER_PIPES_CONTEXT"):
        replaysafe.context(env={"DAGSTER_PIPES_CONTEXT": "bm90IHpsaWI="})


class Key:
    def __init__(self, name: str) -> None:
        self.name = name

    def to_user_string(self) -> str:
        return self.name


def test_extras_carry_the_backfill_the_re_execution_and_a_stable_pipeline() -> None:
    asset = SimpleNamespace(keys=[Key("orders"), Key("customers")])
    context = SimpleNamespace(
        run=SimpleNamespace(tags={"dagster/backfill": "bkf_1", "team": "data"}),
        assets_def=asset,
    )
    assert replaysafe.dagster.extras(context) == {
        "dagster/backfill": "bkf_1",
        "replaysafe/pipeline": "customers,orders",
    }
    fresh = SimpleNamespace(run=SimpleNamespace(tags={}), assets_def=asset)
    assert replaysafe.dagster.extras(fresh, note="x")["dagster/backfill"] is None
    with pytest.raises(ValueError, match="dagster/backfill"):
        replaysafe.dagster.extras(context, **{"dagster/backfill": "other"})
    with pytest.raises(ValueError, match="run tags"):
        replaysafe.dagster.extras(SimpleNamespace())


def test_a_re_execution_takes_the_backfill_of_the_run_it_re_executes() -> None:
    # Dagster drops a backfill's tags from a re-execution of one of its runs.
    runs = {"root": SimpleNamespace(tags={"dagster/backfill": "bkf_9"})}
    instance = SimpleNamespace(get_run_by_id=lambda run_id: runs.get(run_id))
    retried = SimpleNamespace(
        run=SimpleNamespace(tags={"dagster/parent_run_id": "root", "dagster/root_run_id": "root"}),
        instance=instance,
    )
    assert replaysafe.dagster.extras(retried)["dagster/backfill"] == "bkf_9"
    # The run it re-executes cannot be read: the key is left out, the kind is unknown.
    lost = SimpleNamespace(
        run=SimpleNamespace(tags={"dagster/parent_run_id": "gone"}), instance=instance
    )
    extras = replaysafe.dagster.extras(lost)
    assert "dagster/backfill" not in extras
    env = partition(extras)
    assert replaysafe.context(env=env).run_kind == "unknown"
