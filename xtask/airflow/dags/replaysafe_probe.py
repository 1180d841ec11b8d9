"""DAGs that `cargo xtask airflow` runs under a real Airflow scheduler.

Each task records what Airflow gave it (`replaysafe context --json` and the `AIRFLOW_CTX_*`
variables), then sends one webhook through `replaysafe send` to the loopback receiver xtask
started.
The task's exit status is replaysafe's: 0 when the webhook was delivered or suppressed.

xtask passes three variables to the scheduler, which its task processes inherit:
`XTASK_AIRFLOW_REPLAYSAFE` (the binary), `XTASK_AIRFLOW_RECEIVER` (the receiver's URL) and
`XTASK_AIRFLOW_OUT` (where each task writes its records).
Nothing here sets a `REPLAYSAFE_*` variable other than the journal, and there is no
`airflow_local_settings.py`: the context is what a default Airflow 3 exports.
"""

import os
from datetime import datetime, timedelta, timezone

from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

# One folder per run: $XTASK_AIRFLOW_OUT/<dag id>/<run id>/ (the journal's folder).
RECORD_AND_SEND = """
set -u
out="$(dirname "$REPLAYSAFE_JOURNAL")"
mkdir -p "$out"
env | grep '^AIRFLOW_CTX_' | sort > "$out/env.txt"
"$XTASK_AIRFLOW_REPLAYSAFE" context --json > "$out/context.json" 2> "$out/context.err"
echo $? > "$out/context.rc"
exec "$XTASK_AIRFLOW_REPLAYSAFE" send webhook \
    --url "$XTASK_AIRFLOW_RECEIVER/hooks/{{ dag.dag_id }}" \
    --allow-host 127.0.0.1 \
    --event-type probe.finished \
    --data '{"dag_id": "{{ dag.dag_id }}", "run_id": "{{ run_id }}"}'
"""

# Read at parse time (the DAG processor and each task process get xtask's environment).
OUT = os.environ.get("XTASK_AIRFLOW_OUT", "/nonexistent")


def probe(dag_id, schedule, start_date, end_date=None, catchup=False):
    with DAG(
        dag_id=dag_id,
        schedule=schedule,
        start_date=start_date,
        end_date=end_date,
        catchup=catchup,
        max_active_runs=3,
        tags=["replaysafe"],
    ) as dag:
        BashOperator(
            task_id="notify",
            bash_command=RECORD_AND_SEND,
            env={
                "REPLAYSAFE_JOURNAL": OUT + "/{{ dag.dag_id }}/{{ run_id }}/journal.jsonl",
            },
            append_env=True,
        )
    return dag


# Midnight three days back: stable for the whole day, so every parse defines the same DAGs.
THREE_DAYS_AGO = datetime.now(timezone.utc).replace(
    hour=0, minute=0, second=0, microsecond=0
) - timedelta(days=3)

# Every ten minutes; without catch-up the scheduler creates only the latest tick's run.
probe("replaysafe_probe", "*/10 * * * *", THREE_DAYS_AGO)

# One daily tick, three days back, caught up now: a scheduled run that is three days late.
probe(
    "replaysafe_probe_catchup",
    "0 0 * * *",
    THREE_DAYS_AGO,
    end_date=THREE_DAYS_AGO + timedelta(hours=1),
    catchup=True,
)

# Downstream of `replaysafe send trigger`: no schedule, paused, so triggered runs are
# created (and counted through the API) but never run.
with DAG(
    dag_id="replaysafe_downstream",
    schedule=None,
    start_date=THREE_DAYS_AGO,
    catchup=False,
    tags=["replaysafe"],
):
    EmptyOperator(task_id="noop")
