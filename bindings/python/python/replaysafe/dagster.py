"""Dagster Pipes: what the orchestrator side passes so replaysafe can tell a backfill.

A Pipes process gets its run's context in ``DAGSTER_PIPES_CONTEXT`` (run id, job, retry
number, assets, partition and time window, extras), which ``replaysafe.context()`` and the
``replaysafe`` command read. Pipes carries no run tags, so whether the run belongs to a
backfill or re-executes an earlier run must travel in the extras::

    import replaysafe.dagster

    @asset(partitions_def=daily)
    def orders(context, pipes_subprocess_client: PipesSubprocessClient):
        return pipes_subprocess_client.run(
            command=["replaysafe", "send", "webhook", ...],
            context=context,
            extras=replaysafe.dagster.extras(context),
        ).get_materialize_result()

Extras that do not name ``dagster/backfill`` (its id, or None for a run of no backfill)
cannot tell a backfill's run from a fresh one: replaysafe then takes the run's kind as
unknown and suppresses every effect.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TAGS", "extras"]

#: The run tags ``extras`` passes on: the backfill the run belongs to, the run it
#: re-executes, and whether it resumes a failed run.
TAGS = (
    "dagster/backfill",
    "dagster/parent_run_id",
    "dagster/is_resume_retry",
)


def extras(context: Any, **more: Any) -> dict[str, Any]:
    """The Pipes extras replaysafe reads, from a Dagster execution context, merged with
    ``more`` (which must not name the same keys).

    - ``dagster/backfill``: the backfill's id, or None for a run of no backfill. Dagster
      drops a backfill's tags from a re-execution of one of its runs, so a re-execution
      takes it from the run it re-executes (its root run); when that run cannot be read,
      the key is left out, and replaysafe takes the run's kind as unknown.
    - ``dagster/parent_run_id``, ``dagster/is_resume_retry``: when set.
    - ``replaysafe/pipeline``: the asset definition's keys (or the op's name), the same for
      every run whichever of its keys a run selects, so that keys stay the same across a
      re-execution of a subset.
    """
    run = getattr(context, "run", None)
    tags = getattr(run, "tags", None)
    if tags is None:
        raise ValueError("replaysafe.dagster.extras: the context has no run tags (context.run.tags)")
    found: dict[str, Any] = {tag: str(tags[tag]) for tag in TAGS if tags.get(tag) is not None}
    if "dagster/backfill" not in found:
        if tags.get("dagster/parent_run_id") is None:
            found["dagster/backfill"] = None
        else:
            backfill = _backfill_of_root(context, tags)
            if backfill is not _UNKNOWN:
                found["dagster/backfill"] = backfill
    pipeline = _pipeline(context)
    if pipeline is not None:
        found["replaysafe/pipeline"] = pipeline
    clash = sorted(set(found) & set(more))
    if clash:
        raise ValueError(f"replaysafe.dagster.extras: {', '.join(clash)} come from the run's context")
    return {**found, **more}


_UNKNOWN = object()


def _backfill_of_root(context: Any, tags: Any) -> Any:
    """The backfill of the run a re-execution re-executes (None when it had none), or
    ``_UNKNOWN`` when that run cannot be read."""
    root = tags.get("dagster/root_run_id") or tags.get("dagster/parent_run_id")
    try:
        original = context.instance.get_run_by_id(root)
    except Exception:  # noqa: BLE001 (unreadable: the kind stays unknown, which suppresses)
        return _UNKNOWN
    if original is None:
        return _UNKNOWN
    backfill = original.tags.get("dagster/backfill")
    return None if backfill is None else str(backfill)


def _pipeline(context: Any) -> str | None:
    """The asset definition's keys, joined (or the op's name); None when the context has
    neither."""
    try:
        keys = sorted(key.to_user_string() for key in context.assets_def.keys)
    except Exception:  # noqa: BLE001 (an op, not an asset)
        keys = []
    if keys:
        return ",".join(keys)
    name = getattr(getattr(context, "op", None), "name", None)
    return str(name) if name else None
