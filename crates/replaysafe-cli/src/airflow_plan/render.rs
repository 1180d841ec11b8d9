//! `plan --airflow` as text tables, Markdown or JSON, in the style of `plan`.

use replaysafe_review::Table;

use super::{Downstream, PlannedDag, RunsSource, Via};
use crate::render::Format;

/// Run dates listed in the text formats (JSON lists them all).
const DATES_SHOWN: usize = 10;

/// The graph as text tables, Markdown or JSON: what runs how often, then every task and
/// whether the policy gates it, then the notes.
pub fn render(plan: &Downstream, format: Format) -> String {
    if format == Format::Json {
        return serde_json::to_string_pretty(plan).unwrap_or_default() + "\n";
    }
    let text = |text: &str| crate::render::escape(text, format).into_owned();
    let mut out = String::new();
    if format == Format::Markdown {
        out.push_str("## replaysafe plan\n\n");
    }
    let downstream = &plan.dags[plan.dags.len().min(1)..];
    let gated = plan
        .dags
        .iter()
        .flat_map(|dag| &dag.tasks)
        .filter(|task| task.gated)
        .count();
    let tasks = plan.dags.iter().map(|dag| dag.tasks.len()).sum::<usize>();
    let source = match plan.runs_source {
        RunsSource::AirflowDryRun => format!(
            "as Airflow's backfill dry run counts them, reprocess_behavior {}",
            plan.reprocess_behavior.unwrap_or_default().as_str()
        ),
        RunsSource::Every => format!(
            "the ticks of --every {} in the range",
            plan.every.as_deref().unwrap_or("?")
        ),
    };
    let lines = [
        format!(
            "backfill of {} over {} in Airflow at {}",
            text(&plan.dag_id),
            window_text(plan),
            text(&plan.airflow)
        ),
        format!(
            "{}: {} ({source}){}",
            text(&plan.dag_id),
            runs_text(plan.runs, false, false),
            dates_text(&plan.run_dates)
        ),
        format!(
            "downstream: {} ({} in all); tasks: {gated} gated by replaysafe.airflow's policy, {} not gated",
            match downstream.len() {
                1 => "1 DAG".to_owned(),
                n => format!("{n} DAGs"),
            },
            runs_text(
                downstream
                    .iter()
                    .fold(0_u64, |sum, dag| sum.saturating_add(dag.runs)),
                downstream.iter().any(|dag| dag.up_to),
                downstream.iter().any(|dag| dag.at_least),
            ),
            tasks - gated
        ),
    ];
    let separator = if format == Format::Markdown {
        "\n\n"
    } else {
        "\n"
    };
    out.push_str(&lines.join(separator));
    out.push_str("\n\n");

    let mut dags = Table::new(
        "DAGs",
        [
            "DAG",
            "depth",
            "runs",
            "runs with the policy",
            "paused",
            "schedule",
            "started by",
        ],
    );
    for dag in &plan.dags {
        dags.row([
            dag.dag_id.clone(),
            dag.depth.to_string(),
            runs_text(dag.runs, dag.up_to, dag.at_least),
            runs_text(
                dag.runs_with_policy,
                dag.up_to && dag.runs_with_policy > 0,
                dag.at_least_with_policy,
            ),
            if dag.paused { "yes" } else { "no" }.to_owned(),
            dag.schedule.clone().unwrap_or_else(|| "none".to_owned()),
            started_by_text(dag),
        ]);
    }
    out.push_str(&dags.render(format.into()));
    out.push('\n');

    let mut tasks = Table::new(
        "tasks",
        [
            "DAG",
            "task",
            "operator",
            "gated",
            "replaysafe.airflow policy",
        ],
    );
    for dag in &plan.dags {
        for task in &dag.tasks {
            let operator = if task.mapped {
                format!("{} (mapped)", task.operator)
            } else {
                task.operator.clone()
            };
            tasks.row([
                dag.dag_id.clone(),
                task.task_id.clone(),
                operator,
                if task.gated { "yes" } else { "no" }.to_owned(),
                task.note.clone(),
            ]);
        }
    }
    out.push_str(&tasks.render(format.into()));

    if !plan.cycles.is_empty() {
        let mut cycles = Table::new(
            "cycles (not followed, not counted)",
            ["DAG", "starts again", "via"],
        );
        for cycle in &plan.cycles {
            cycles.row([
                cycle.dag_id.clone(),
                cycle.starts.clone(),
                via_text(&cycle.dag_id, &cycle.via),
            ]);
        }
        out.push('\n');
        out.push_str(&cycles.render(format.into()));
    }

    out.push_str(if format == Format::Markdown {
        "\n### notes\n\n"
    } else {
        "\nnotes\n"
    });
    for note in &plan.notes {
        out.push_str(&format!("- {}\n", text(note)));
    }
    out
}

fn window_text(plan: &Downstream) -> String {
    format!(
        "{} → {}",
        date_or_time(&replaysafe_core::rfc3339(plan.start)),
        date_or_time(&replaysafe_core::rfc3339(plan.end))
    )
}

/// A date when the time is midnight UTC.
fn date_or_time(text: &str) -> String {
    text.strip_suffix("T00:00:00Z").unwrap_or(text).to_owned()
}

fn runs_text(runs: u64, up_to: bool, at_least: bool) -> String {
    let noun = if runs == 1 { "run" } else { "runs" };
    if at_least {
        format!("at least {runs} {noun} (no bound: a cycle or a mapped trigger)")
    } else if up_to {
        format!("up to {runs} {noun}")
    } else {
        format!("{runs} {noun}")
    }
}

fn dates_text(dates: &[String]) -> String {
    if dates.is_empty() {
        return String::new();
    }
    let shown: Vec<String> = dates
        .iter()
        .take(DATES_SHOWN)
        .map(|date| date_or_time(date))
        .collect();
    let more = if dates.len() > DATES_SHOWN {
        format!(", … ({} in all)", dates.len())
    } else {
        String::new()
    };
    format!(": {}{more}", shown.join(", "))
}

fn via_text(from: &str, via: &Via) -> String {
    match via {
        Via::Asset { asset } => format!("asset {asset} of {from}"),
        Via::Trigger { task_id } => format!("{from}.{task_id} (TriggerDagRunOperator)"),
    }
}

fn started_by_text(dag: &PlannedDag) -> String {
    if dag.depth == 0 {
        return "the backfill".to_owned();
    }
    dag.started_by
        .iter()
        .map(|link| via_text(&link.dag_id, &link.via))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use chrono::TimeZone;

    use super::*;
    use crate::airflow_plan::{PlannedTask, Reprocess, StartedBy};

    fn plan() -> Downstream {
        let task = |task_id: &str, gated: bool, note: &str| PlannedTask {
            task_id: task_id.into(),
            operator: if gated {
                "EmailOperator"
            } else {
                "BashOperator"
            }
            .into(),
            class: None,
            gated,
            effect_kind: gated.then(|| "email".into()),
            mapped: false,
            starts: Vec::new(),
            note: note.into(),
        };
        Downstream {
            airflow: "http://127.0.0.1:8080/".into(),
            dag_id: "a".into(),
            start: Utc.with_ymd_and_hms(2026, 11, 28, 0, 0, 0).unwrap(),
            end: Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap(),
            runs_source: RunsSource::AirflowDryRun,
            every: None,
            reprocess_behavior: Some(Reprocess::None),
            runs: 2,
            run_dates: vec!["2026-11-28T00:00:00Z".into(), "2026-11-29T00:00:00Z".into()],
            dags: vec![
                PlannedDag {
                    dag_id: "a".into(),
                    depth: 0,
                    runs: 2,
                    up_to: false,
                    at_least: false,
                    at_least_with_policy: false,
                    runs_with_policy: 2,
                    paused: false,
                    schedule: Some("0 0 * * *".into()),
                    started_by: Vec::new(),
                    tasks: vec![task("load", false, "not gated")],
                },
                PlannedDag {
                    dag_id: "b|c".into(),
                    depth: 1,
                    runs: 2,
                    up_to: true,
                    at_least: false,
                    at_least_with_policy: false,
                    runs_with_policy: 2,
                    paused: true,
                    schedule: Some("Asset".into()),
                    started_by: vec![StartedBy {
                        dag_id: "a".into(),
                        via: Via::Asset {
                            asset: "orders".into(),
                        },
                    }],
                    tasks: vec![task("mail", true, "gated (email): suppressed in a replay")],
                },
            ],
            cycles: Vec::new(),
            notes: vec!["a note".into()],
        }
    }

    use chrono::Utc;

    #[test]
    fn the_text_says_how_many_runs_and_which_tasks_are_gated() {
        let text = render(&plan(), Format::Table);
        assert!(text.starts_with(
            "backfill of a over 2026-11-28 → 2026-12-01 in Airflow at http://127.0.0.1:8080/\n\
             a: 2 runs (as Airflow's backfill dry run counts them, reprocess_behavior none): 2026-11-28, 2026-11-29\n\
             downstream: 1 DAG (up to 2 runs in all); tasks: 1 gated by replaysafe.airflow's policy, 1 not gated\n"
        ), "{text}");
        assert!(
            text.contains(
                "┆ up to 2 runs ┆ up to 2 runs         ┆ yes    ┆ Asset     ┆ asset orders of a"
            ),
            "{text}"
        );
        assert!(
            text.contains("gated (email): suppressed in a replay"),
            "{text}"
        );
        assert!(text.ends_with("notes\n- a note\n"), "{text}");
    }

    #[test]
    fn markdown_escapes_cells_and_json_is_the_model() {
        let markdown = render(&plan(), Format::Markdown);
        assert!(
            markdown.starts_with("## replaysafe plan\n\nbackfill of a"),
            "{markdown}"
        );
        assert!(
            markdown.contains("| b\\|c | 1 | up to 2 runs | up to 2 runs | yes |"),
            "{markdown}"
        );
        assert!(markdown.contains("### notes\n\n- a note\n"), "{markdown}");
        let json: serde_json::Value = serde_json::from_str(&render(&plan(), Format::Json)).unwrap();
        assert_eq!(json["runs_source"], "airflow_dry_run");
        assert_eq!(json["reprocess_behavior"], "none");
        assert_eq!(json["dags"][1]["up_to"], true);
        assert_eq!(json["dags"][1]["started_by"][0]["via"], "asset");
        assert_eq!(json["dags"][1]["started_by"][0]["asset"], "orders");
        assert_eq!(json["dags"][1]["tasks"][0]["effect_kind"], "email");
    }
}
