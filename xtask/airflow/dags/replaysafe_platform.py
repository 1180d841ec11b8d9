"""DAGs that `cargo xtask airflow` runs to check `replaysafe.airflow`, the platform integration.

- `replaysafe_producer` (A) updates the asset `replaysafe_orders` once a day.
- `replaysafe_consumer` (B) is scheduled on that asset: it sends one webhook through the
  `replaysafe send` command, one through the Python API, and starts `replaysafe_report`
  through Airflow's own TriggerDagRunOperator.
- `replaysafe_producer_plain` and `replaysafe_consumer_plain`: the same pair on its own
  asset, run before the integration is installed.
- `replaysafe_report` (C) is only ever triggered (and stays paused: its runs are counted).
- `replaysafe_policy` runs Airflow's own sending operators and a notifier, none of them
  written with replaysafe in mind: EmailOperator, HttpOperator, SlackWebhookOperator,
  SFTPOperator, TriggerDagRunOperator, and SmtpNotifier in an `on_failure_callback`.

The daily DAGs have a real data interval (the day before the tick). The connections
(`smtp_default`, `replaysafe_receiver`, `replaysafe_slack`, `replaysafe_sftp`) come from
`AIRFLOW_CONN_*` variables xtask sets; `XTASK_AIRFLOW_*` name the binary, the receiver and
the folder for records. Whether the integration is installed is only a matter of
`airflow_local_settings.py`: these DAGs are the same with and without it.
"""

import os
from datetime import datetime, timedelta, timezone

from airflow.providers.http.operators.http import HttpOperator
from airflow.providers.sftp.operators.sftp import SFTPOperator
from airflow.providers.slack.operators.slack_webhook import SlackWebhookOperator
from airflow.providers.smtp.notifications.smtp import SmtpNotifier
from airflow.providers.smtp.operators.smtp import EmailOperator
from airflow.providers.standard.operators.bash import BashOperator
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.providers.standard.operators.python import PythonOperator
from airflow.providers.standard.operators.trigger_dagrun import TriggerDagRunOperator
from airflow.sdk import DAG, Asset
from airflow.timetables.trigger import CronTriggerTimetable

OUT = os.environ.get("XTASK_AIRFLOW_OUT", "/nonexistent")
RECEIVER = os.environ.get("XTASK_AIRFLOW_RECEIVER", "http://127.0.0.1:9")
# Midnight six days back: stable for the whole day, so every parse defines the same DAGs.
START = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0) - timedelta(
    days=6
)


def daily():
    """Every midnight UTC, the data interval being the day before."""
    return CronTriggerTimetable("0 0 * * *", timezone="UTC", interval=timedelta(days=1))


def publish(**context):
    """Writes the day's orders (here: nothing) and so updates the asset."""
    return "published"


# The consumer's CLI task: `replaysafe send` reads the task's environment.
SEND_WITH_THE_COMMAND = """
set -u
exec "$XTASK_AIRFLOW_REPLAYSAFE" send webhook \\
    --url "$XTASK_AIRFLOW_RECEIVER/hooks/{{ dag.dag_id }}/cli" \\
    --allow-host 127.0.0.1 \\
    --event-type orders.published \\
    --data '{"dag_id": "{{ dag.dag_id }}", "run_id": "{{ run_id }}"}'
"""


def send_with_the_python_api(dag_id, run_id):
    """The same notification through `import replaysafe`."""
    import replaysafe

    client = replaysafe.WebhookClient(
        url=f"{RECEIVER}/hooks/{dag_id}/python", allow_hosts=["127.0.0.1"]
    )
    outcome = client.send(
        replaysafe.context(),
        event_type="orders.published",
        data={"dag_id": dag_id, "run_id": run_id},
        raise_on_failure=True,
    )
    return outcome.decision


def asset_pair(suffix):
    """A producer that updates an asset daily and a consumer scheduled on the asset, which
    notifies through the command and the Python API and triggers `replaysafe_report`."""
    asset = Asset("replaysafe_orders" + suffix)
    with DAG(
        dag_id="replaysafe_producer" + suffix,
        schedule=daily(),
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["replaysafe"],
    ):
        PythonOperator(task_id="publish", python_callable=publish, outlets=[asset])
    with DAG(
        dag_id="replaysafe_consumer" + suffix,
        schedule=[asset],
        start_date=START,
        catchup=False,
        max_active_runs=1,
        tags=["replaysafe"],
    ):
        BashOperator(task_id="notify_cli", bash_command=SEND_WITH_THE_COMMAND, append_env=True)
        PythonOperator(
            task_id="notify_python",
            python_callable=send_with_the_python_api,
            op_kwargs={"dag_id": "{{ dag.dag_id }}", "run_id": "{{ run_id }}"},
        )
        TriggerDagRunOperator(
            task_id="start_report",
            trigger_dag_id="replaysafe_report",
            conf={"from": "replaysafe_consumer" + suffix},
        )


# Checked with the integration installed (A -> B -> C) ...
asset_pair("")
# ... and without it, before it is installed.
asset_pair("_plain")

with DAG(
    dag_id="replaysafe_report",
    schedule=None,
    start_date=START,
    catchup=False,
    tags=["replaysafe"],
):
    EmptyOperator(task_id="assemble")
    EmailOperator(
        task_id="mail_report",
        to="finance@shop.example",
        subject="Orders report {{ run_id }}",
        html_content="<p>The report is ready.</p>",
    )


def fail(**context):
    """Fails on purpose: its on_failure_callback notifies."""
    raise RuntimeError("the load failed (on purpose)")


with DAG(
    dag_id="replaysafe_policy",
    schedule=daily(),
    start_date=START,
    catchup=False,
    max_active_runs=3,
    tags=["replaysafe"],
):
    EmailOperator(
        task_id="email",
        to=["ana@shop.example", "ben@shop.example"],
        subject="Orders {{ run_id }}",
        html_content="<p>The orders of {{ data_interval_start | ds }}.</p>",
    )
    HttpOperator(
        task_id="http",
        http_conn_id="replaysafe_receiver",
        endpoint="hooks/replaysafe_policy/http",
        method="POST",
        data='{"run_id": "{{ run_id }}"}',
        headers={"Content-Type": "application/json"},
    )
    SlackWebhookOperator(
        task_id="slack",
        slack_webhook_conn_id="replaysafe_slack",
        message="Orders loaded for {{ run_id }}",
    )
    SFTPOperator(
        task_id="sftp",
        ssh_conn_id="replaysafe_sftp",
        local_filepath=OUT + "/policy-drop.csv",
        remote_filepath=os.environ.get("XTASK_AIRFLOW_SFTP_DIR", "/nonexistent")
        + "/orders-{{ data_interval_start | ds }}.csv",
        operation="put",
    )
    TriggerDagRunOperator(
        task_id="trigger", trigger_dag_id="replaysafe_report", conf={"from": "replaysafe_policy"}
    )
    PythonOperator(
        task_id="fail",
        python_callable=fail,
        retries=0,
        on_failure_callback=SmtpNotifier(
            to="oncall@shop.example",
            subject="Failed {{ run_id }}",
            html_content="<p>{{ ti.task_id }} failed.</p>",
        ),
    )
