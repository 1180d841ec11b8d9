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

A run without them looks like a fresh one: a backfill's runs would then be taken for
current (unless their partitions are old enough to be stale).
"""

from __future__ import annotations

from typing import Any

__all__ = ["TAGS", "extras"]

#: The run tags ``extras`` passes on: the backfill the run belongs to, the run it
#: re-executes, whether it resumes a failed run, and the partition range of a run over
#: several partitions.
TAGS = (
    "dagster/backfill",
    "dagster/parent_run_id",
    "dagster/root_run_id",
    "dagster/is_resume_retry",
    "dagster/asset_partition_range_start",
    "dagster/asset_partition_range_end",
)


def extras(context: Any, **more: Any) -> dict[str, Any]:
    """The Pipes extras replaysafe reads, from a Dagster execution context's run tags,
    merged with ``more`` (which must not name the same keys)."""
    run = getattr(context, "run", None)
    tags = getattr(run, "tags", None) or {}
    found = {tag: str(tags[tag]) for tag in TAGS if tags.get(tag) is not None}
    clash = sorted(set(found) & set(more))
    if clash:
        raise ValueError(f"replaysafe.dagster.extras: {', '.join(clash)} come from the run's tags")
    return {**found, **more}
