"""The Python API's benchmarks, run by `cargo xtask bench` in a virtualenv holding the
release wheel and httpx. Writes `$REPLAYSAFE_BENCH_OUT/python.json` in the format of the
Rust benchmarks: each figure a value and a unit, each ratio with the baseline measured in
the same run, interleaved with it.

- a suppressed `WebhookClient.send` (a backfill's context, JSON Lines journal), µs;
- a delivered webhook from Python against httpx posting the same body to the same loopback
  receiver (answering at once), as a ratio of throughputs;
- `outbox.stage` against a raw sqlite3 upsert of the same row (the same statement and
  parameters, computed once), as a ratio of throughputs;
- the Airflow policy's overhead per wrapped task: an operator the policy gates, run as the
  task runner runs it, each task its own run, against the same operator unwrapped (median
  of 20 tasks, and the mean of many), in a current run and in a backfill, ms/task.
"""

from __future__ import annotations

import datetime as dt
import http.server
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx

import replaysafe
from replaysafe import _native
from replaysafe import airflow as rs_airflow

REPEATS = 7


def rfc3339(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def context(run_kind: str, days_ago: int) -> replaysafe.Context:
    end = dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=days_ago, minutes=5)
    return replaysafe.context(env={
        "REPLAYSAFE_PIPELINE": "bench",
        "REPLAYSAFE_RUN_ID": f"{run_kind}__bench",
        "REPLAYSAFE_RUN_KIND": run_kind,
        "REPLAYSAFE_WINDOW_START": rfc3339(end - dt.timedelta(hours=1)),
        "REPLAYSAFE_WINDOW_END": rfc3339(end),
    })


def best_per_call(call: Callable[[int], object], calls: int) -> float:
    """The fastest of REPEATS rounds of `calls` calls, in seconds per call."""
    best = float("inf")
    for _ in range(REPEATS):
        started = time.perf_counter()
        for n in range(calls):
            call(n)
        best = min(best, (time.perf_counter() - started) / calls)
    return best


def interleaved(a: Callable[[int], object], b: Callable[[int], object], calls: int) -> tuple[float, float]:
    """The fastest round of each, rounds taken in turn: seconds per call for a and for b."""
    best_a = best_b = float("inf")
    offset = 0
    for _ in range(REPEATS):
        for which in ("a", "b"):
            call = a if which == "a" else b
            started = time.perf_counter()
            for n in range(calls):
                call(offset + n)
            took = (time.perf_counter() - started) / calls
            if which == "a":
                best_a = min(best_a, took)
            else:
                best_b = min(best_b, took)
            offset += calls
    return best_a, best_b


class Receiver:
    def __init__(self) -> None:
        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks"


def main() -> None:
    out = Path(os.environ.get("REPLAYSAFE_BENCH_OUT", "target/bench"))
    out.mkdir(parents=True, exist_ok=True)
    figures: dict[str, dict[str, object]] = {}
    work = Path(tempfile.mkdtemp(prefix="replaysafe-pybench-"))

    def figure(name: str, value: float, unit: str, baseline: str | None = None) -> None:
        entry: dict[str, object] = {"value": value, "unit": unit}
        if baseline:
            entry["baseline"] = baseline
        figures[name] = entry
        print(f"{name:<52} {value:>14.3} {unit}" + (f" (baseline: {baseline})" if baseline else ""))

    backfill = context("backfill", 30)
    current = context("scheduled", 0)

    # A suppressed send: the gate, the key, one journal line.
    quiet = replaysafe.WebhookClient("https://partner.example/hooks", journal=work / "suppressed.jsonl",
                                     ledger=False)
    per_call = best_per_call(lambda n: quiet.send(backfill, event_type="orders.published", data={"n": n}), 2000)
    figure("python.suppressed_send", per_call * 1e6, "µs/send")

    # Delivered webhooks against httpx, the same body to the same receiver.
    receiver = Receiver()
    hook = replaysafe.WebhookClient(receiver.url, allow_hosts=["127.0.0.1"], journal=work / "delivered.jsonl",
                                    ledger=False)
    raw = httpx.Client()
    body = json.dumps({"orders": 1204}).encode()

    def guarded(n: int) -> None:
        hook.send(current, event_type=f"orders.{n}", data={"orders": 1204}, raise_on_failure=True)

    def plain(n: int) -> None:
        raw.post(receiver.url, content=body, headers={"content-type": "application/json",
                                                       "idempotency-key": f"k{n}"}).raise_for_status()

    for n in range(50):
        guarded(n)
        plain(n)
    guarded_s, raw_s = interleaved(guarded, plain, 300)
    figure("python.webhook.guarded_per_second", 1 / guarded_s, "webhooks/s")
    figure("python.webhook.httpx_per_second", 1 / raw_s, "webhooks/s")
    figure("python.webhook.guarded_vs_httpx_throughput", raw_s / guarded_s,
           "httpx.Client posting the same body to the same loopback receiver, interleaved")

    # outbox.stage against a raw sqlite3 upsert of the same row.
    db = work / "outbox.db"
    binary = Path(sys.executable).parent / "replaysafe"
    subprocess.run([str(binary), "outbox", "init", "--database", f"sqlite:{db}"], check=True,
                   capture_output=True)
    conn = sqlite3.connect(db)
    stager = replaysafe.WebhookClient("https://partner.example/hooks", journal=work / "stage.jsonl")
    effect = replaysafe.Webhook(event_type="orders.published", data={"orders": 1204})
    params, _, _, _ = _native.outbox_stage_params(current, "partner", stager, effect, 0)
    version = [0]

    def staged(n: int) -> None:
        version[0] += 1
        with conn:
            replaysafe.outbox.stage(conn, current, route="partner", effect=effect, client=stager,
                                    source_version=version[0])

    def upsert(n: int) -> None:
        version[0] += 1
        row = list(params)
        row[26] = version[0]
        with conn:
            conn.execute(_native.SQLITE_STAGE_SQL, row)

    for n in range(50):
        staged(n)
        upsert(n)
    stage_s, upsert_s = interleaved(staged, upsert, 500)
    figure("python.outbox.stage_per_second", 1 / stage_s, "rows/s")
    figure("python.outbox.raw_upsert_per_second", 1 / upsert_s, "rows/s")
    figure("python.outbox.stage_vs_raw_sqlite3_throughput", upsert_s / stage_s,
           "the same statement and parameters through sqlite3, each in its own transaction, interleaved")

    # The Airflow policy's overhead per wrapped task.
    os.environ["REPLAYSAFE_JOURNAL"] = str(work / "airflow.jsonl")

    class EmailOperator:
        """Shaped like the smtp provider's operator; its execute does nothing."""

        task_id = "daily_summary"
        to = ["ana@shop.example"]
        subject = "Daily orders"
        html_content = "<p>1204 orders</p>"
        outlets: list[object] = []

        def execute(self, context: object) -> None:
            return None

    EmailOperator.__module__ = "airflow.providers.smtp.operators.smtp"
    operator = EmailOperator()
    rs_airflow.task_policy(operator)
    now = dt.datetime.now(dt.timezone.utc)

    def task_context(run_type: str, n: int) -> dict[str, object]:
        # Each task its own run, as in Airflow: a distinct run id and logical date.
        age = dt.timedelta(days=30) if run_type == "backfill" else dt.timedelta(minutes=5)
        logical = now - age - dt.timedelta(seconds=n)
        run = type("DagRun", (), {
            "run_id": f"{run_type}__{n}", "run_type": run_type, "logical_date": logical,
            "data_interval_start": None, "data_interval_end": None, "clear_number": 0,
            "conf": {}, "consumed_asset_events": [],
        })()
        ti = type("TI", (), {"dag_id": "orders", "task_id": "daily_summary", "try_number": 1,
                             "map_index": -1})()
        return {"dag_run": run, "ti": ti, "task": operator}

    def overhead(run_type: str, tasks: int) -> tuple[float, float]:
        contexts = [task_context(run_type, n) for n in range(2 * tasks)]
        wrapped, raw = [], []
        for n in range(tasks):
            started = time.perf_counter()
            operator.execute(contexts[n])
            wrapped.append(time.perf_counter() - started)
            started = time.perf_counter()
            type(operator).execute(operator, contexts[tasks + n])
            raw.append(time.perf_counter() - started)
        median = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
        return median(wrapped) - median(raw), (sum(wrapped) - sum(raw)) / tasks

    for run_type, name in (("scheduled", "current_run"), ("backfill", "backfill")):
        overhead(run_type, 50)  # warm up
        median20, _ = overhead(run_type, 20)
        _, mean = overhead(run_type, 2000)
        figure(f"python.airflow_policy.{name}.overhead_median_of_20", median20 * 1e3, "ms/task")
        figure(f"python.airflow_policy.{name}.overhead_mean", mean * 1e3, "ms/task")

    (out / "python.json").write_text(json.dumps(figures, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
