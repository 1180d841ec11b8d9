"""`cargo xtask dagster`: replaysafe under real Dagster Pipes (dagster and dagster-pipes
from PyPI), against a loopback HTTP receiver.

A daily-partitioned asset runs `replaysafe send webhook` through Dagster's
PipesSubprocessClient with `replaysafe.dagster.extras(context)`:

- materializing the latest partition delivers once, and the journal's counts come back to
  Dagster as a Pipes custom message;
- three older partitions materialized as runs of one backfill (the `dagster/backfill` tag
  the backfill daemon gives its runs) deliver nothing and journal `replay_run`;
- re-executing the latest partition (`dagster/parent_run_id`) keeps the key: nothing is
  sent again (`already_delivered`);
- re-executing a backfill's run (which Dagster gives no backfill tag) is still the
  backfill's: `replay_run`, nothing sent;
- a run whose extras do not name `dagster/backfill` (an asset written without the helper)
  cannot be told from a backfill's: `unknown_context`, nothing sent;
- a statically partitioned asset has no time window: `unknown_window`, nothing sent.

Arguments: the `replaysafe` binary and a scratch directory. Prints one line per check and
`dagster: N passed, M failed`; exits 1 on any failure.
"""


import datetime as dt
import http.server
import json
import sys
import threading
from pathlib import Path

import dagster as dg

import replaysafe.dagster

REPLAYSAFE, SCRATCH = sys.argv[1], Path(sys.argv[2])
JOURNAL = SCRATCH / "journal.jsonl"
MESSAGES = SCRATCH / "custom-messages.jsonl"
received: list[tuple[str, bytes]] = []


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        received.append((self.path, body))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
RECEIVER = f"http://127.0.0.1:{server.server_address[1]}/hooks/orders"

TODAY = dt.datetime.now(dt.timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
daily = dg.DailyPartitionsDefinition(start_date=(TODAY - dt.timedelta(days=10)).strftime("%Y-%m-%d"))
regions = dg.StaticPartitionsDefinition(["eu", "us"])


def send(context: dg.AssetExecutionContext, client: dg.PipesSubprocessClient) -> dg.MaterializeResult:
    # A run tagged `xtask/run_kind` also sets REPLAYSAFE_RUN_KIND, to make sources disagree.
    explicit = context.run.tags.get("xtask/run_kind")
    invocation = client.run(
        command=[
            REPLAYSAFE, "send", "webhook", "--url", RECEIVER, "--allow-host", "127.0.0.1",
            "--event-type", "orders.published",
            "--data", json.dumps({"partition": context.partition_key, "run_id": context.run_id}),
        ],
        context=context,
        # A run tagged `xtask/no_extras` passes none, as an asset written without the helper.
        extras={} if context.run.tags.get("xtask/no_extras") else replaysafe.dagster.extras(context),
        env={
            "REPLAYSAFE_JOURNAL": str(JOURNAL),
            "REPLAYSAFE_MAX_AGE": "webhook=2d",
            **({"REPLAYSAFE_RUN_KIND": explicit} if explicit else {}),
        },
    )
    with MESSAGES.open("a") as out:
        for message in invocation.get_custom_messages():
            out.write(json.dumps({"run_id": context.run_id, "message": message}) + "\n")
    return invocation.get_materialize_result()


@dg.asset(partitions_def=daily)
def orders(context: dg.AssetExecutionContext, pipes: dg.PipesSubprocessClient) -> dg.MaterializeResult:
    return send(context, pipes)


@dg.asset(partitions_def=regions)
def regional_orders(context: dg.AssetExecutionContext, pipes: dg.PipesSubprocessClient) -> dg.MaterializeResult:
    return send(context, pipes)


instance = dg.DagsterInstance.ephemeral()
resources = {"pipes": dg.PipesSubprocessClient()}
passed: list[str] = []
failed: list[str] = []


def check(name: str, ok: bool, detail: object = "") -> None:
    (passed if ok else failed).append(name)
    print(f"dagster: {'ok    ' if ok else 'FAILED'} {name}" + ("" if ok else f": {detail}"), flush=True)


def run(asset: dg.AssetsDefinition, partition: str, tags: dict[str, str] | None = None) -> str:
    result = dg.materialize([asset], partition_key=partition, instance=instance, resources=resources,
                            tags=tags or {})
    check(f"the run of {asset.key.to_user_string()} {partition} {tags or ''} succeeded", result.success)
    return result.run_id


def records(run_id: str) -> list[dict[str, object]]:
    lines = JOURNAL.read_text().splitlines() if JOURNAL.exists() else []
    return [r for r in map(json.loads, lines) if r["run_id"] == run_id and r["decision"] != "attempting"]


def reasons(run_id: str) -> list[list[str]]:
    return [list(r["reasons"]) for r in records(run_id)]  # type: ignore[call-overload]


def requests_from(run_id: str) -> int:
    return sum(1 for _, body in received if run_id.encode() in body)


def custom(run_id: str) -> list[object]:
    lines = MESSAGES.read_text().splitlines() if MESSAGES.exists() else []
    return [m["message"] for m in map(json.loads, lines) if m["run_id"] == run_id]


latest = (TODAY - dt.timedelta(days=1)).strftime("%Y-%m-%d")
first = run(orders, latest)
check("the latest partition delivered once", requests_from(first) == 1, received)
check("its journal says delivered", [r["decision"] for r in records(first)] == ["delivered"], records(first))
check(
    "the journal's counts came back to Dagster as a Pipes custom message",
    custom(first) == [{"replaysafe": {"delivered": 1, "suppressed": 0, "failed": 0, "in_doubt": 0}}],
    custom(first),
)

backfill_runs = {}
for days in (4, 3, 2):
    partition = (TODAY - dt.timedelta(days=days)).strftime("%Y-%m-%d")
    backfill = run(orders, partition, {"dagster/backfill": "xtaskbkf"})
    backfill_runs[partition] = backfill
    check(f"the backfill's run of {partition} sent nothing", requests_from(backfill) == 0, received)
    check(f"the backfill's run of {partition} journaled replay_run",
          len(records(backfill)) == 1 and "replay_run" in reasons(backfill)[0]
          and records(backfill)[0]["backfill_id"] == "xtaskbkf", records(backfill))
    check(f"the backfill's run of {partition} reported one suppressed effect to Dagster",
          custom(backfill) == [{"replaysafe": {"delivered": 0, "suppressed": 1, "failed": 0, "in_doubt": 0}}],
          custom(backfill))

again = run(orders, latest, {"dagster/parent_run_id": first})
first_key = records(first)[0]["effect"]["idempotency_key"]  # type: ignore[index]
check("a re-execution of the latest partition sent nothing", requests_from(again) == 0, received)
check("the re-execution kept the key and journaled already_delivered",
      len(records(again)) == 1 and records(again)[0]["effect"]["idempotency_key"] == first_key  # type: ignore[index]
      and "already_delivered" in reasons(again)[0], records(again))

claimed = run(orders, (TODAY - dt.timedelta(days=5)).strftime("%Y-%m-%d"),
              {"dagster/backfill": "xtaskbkf", "xtask/run_kind": "scheduled"})
check("a backfill's run whose REPLAYSAFE_RUN_KIND says scheduled sent nothing", requests_from(claimed) == 0)
check("and journaled conflicting_context",
      len(records(claimed)) == 1 and "conflicting_context" in reasons(claimed)[0], records(claimed))

# Dagster drops the backfill's tag from a re-execution of a backfill's run: the helper
# takes it from the run re-executed, so the re-execution is suppressed too.
yesterdays_backfill = (TODAY - dt.timedelta(days=2)).strftime("%Y-%m-%d")
rerun = run(orders, yesterdays_backfill, {"dagster/parent_run_id": backfill_runs[yesterdays_backfill]})
check("a re-execution of a backfill's run sent nothing", requests_from(rerun) == 0, received)
check("and journaled replay_run with the backfill's id",
      len(records(rerun)) == 1 and "replay_run" in reasons(rerun)[0]
      and records(rerun)[0]["backfill_id"] == "xtaskbkf", records(rerun))

untold = run(orders, latest, {"xtask/no_extras": "1"})
check("a run whose extras do not say whether it is a backfill's sent nothing", requests_from(untold) == 0)
check("and journaled unknown_context",
      len(records(untold)) == 1 and "unknown_context" in reasons(untold)[0], records(untold))

static = run(regional_orders, "eu")
check("a partition without a time window sent nothing", requests_from(static) == 0, received)
check("a partition without a time window journaled unknown_window",
      len(records(static)) == 1 and "unknown_window" in reasons(static)[0], records(static))

print(f"dagster: {len(passed)} passed, {len(failed)} failed")
sys.exit(1 if failed else 0)
