//! Airflow's answers, as the API server sends them, and the walk from the backfilled DAG to
//! every DAG downstream of it, with the runs each would get.

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use chrono::{DateTime, Utc};
use serde::Deserialize;

use super::{Cycle, PlannedDag, PlannedTask, StartedBy, Via};

/// `GET /api/v2/dags/{dag_id}` (the fields used).
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct DagJson {
    pub(crate) dag_id: String,
    #[serde(default)]
    pub(crate) is_paused: bool,
    #[serde(default)]
    pub(crate) timetable_summary: Option<String>,
}

/// `GET /api/v2/assets?dag_ids=…`: one page.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct AssetPage {
    pub(crate) assets: Vec<AssetJson>,
    pub(crate) total_entries: usize,
}

/// One asset: the tasks that update it and the DAGs scheduled on it.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct AssetJson {
    pub(crate) name: String,
    #[serde(default)]
    producing_tasks: Vec<TaskRef>,
    #[serde(default)]
    scheduled_dags: Vec<DagRef>,
}

#[derive(Clone, Debug, Deserialize)]
struct TaskRef {
    dag_id: String,
}

#[derive(Clone, Debug, Deserialize)]
struct DagRef {
    dag_id: String,
}

/// `GET /api/v2/dags/{dag_id}/tasks`.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct TaskPage {
    pub(crate) tasks: Vec<TaskJson>,
}

/// One task: its operator, as Airflow names it and as a class.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct TaskJson {
    task_id: String,
    #[serde(default)]
    operator_name: Option<String>,
    #[serde(default)]
    class_ref: Option<ClassRef>,
    #[serde(default)]
    is_mapped: Option<bool>,
}

#[derive(Clone, Debug, Default, Deserialize)]
struct ClassRef {
    #[serde(default)]
    module_path: Option<String>,
    #[serde(default)]
    class_name: Option<String>,
}

/// `GET /ui/dependencies`: the scheduling dependencies the UI draws. A
/// TriggerDagRunOperator is a node `trigger:{dag}:{target}:{task}` labelled with its task
/// id, between an edge from `dag:{dag}` and an edge to `dag:{target}`.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct DependencyGraph {
    nodes: Vec<GraphNode>,
    edges: Vec<GraphEdge>,
}

#[derive(Clone, Debug, Deserialize)]
struct GraphNode {
    id: String,
    label: String,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Clone, Debug, Deserialize)]
struct GraphEdge {
    source_id: String,
    target_id: String,
}

/// `POST /api/v2/backfills/dry_run`: the runs a backfill would create.
#[derive(Clone, Debug, Default, Deserialize)]
pub(crate) struct DryRun {
    pub(crate) backfills: Vec<DryRunEntry>,
}

/// One run of a dry run: a logical date, or for a partitioned timetable a partition.
#[derive(Clone, Debug, Deserialize)]
pub(crate) struct DryRunEntry {
    #[serde(default)]
    pub(crate) logical_date: Option<DateTime<Utc>>,
    #[serde(default)]
    pub(crate) partition_key: Option<String>,
    #[serde(default)]
    pub(crate) partition_date: Option<DateTime<Utc>>,
}

/// What a TriggerDagRunOperator starts: per DAG, its trigger tasks and their targets.
#[derive(Clone, Debug, Default)]
pub(crate) struct Triggers {
    by_dag: BTreeMap<String, Vec<(String, String)>>,
}

impl Triggers {
    /// The trigger edges of the UI's dependency graph.
    pub(crate) fn from_graph(graph: &DependencyGraph) -> Self {
        let dag_of = |id: &str| id.strip_prefix("dag:").map(str::to_owned);
        let mut by_dag: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
        for node in graph.nodes.iter().filter(|node| node.kind == "trigger") {
            let sources = graph
                .edges
                .iter()
                .filter(|edge| edge.target_id == node.id)
                .filter_map(|edge| dag_of(&edge.source_id));
            let targets: Vec<String> = graph
                .edges
                .iter()
                .filter(|edge| edge.source_id == node.id)
                .filter_map(|edge| dag_of(&edge.target_id))
                .collect();
            for source in sources {
                for target in &targets {
                    by_dag
                        .entry(source.clone())
                        .or_default()
                        .push((node.label.clone(), target.clone()));
                }
            }
        }
        for edges in by_dag.values_mut() {
            edges.sort();
            edges.dedup();
        }
        Triggers { by_dag }
    }

    /// The `(task, target DAG)` pairs of `dag`'s TriggerDagRunOperators.
    fn of(&self, dag: &str) -> &[(String, String)] {
        self.by_dag.get(dag).map_or(&[], Vec::as_slice)
    }
}

/// Where the walk reads Airflow: the API server, or fixtures in tests.
pub(crate) trait Source {
    /// The DAG, or `None` when Airflow has no DAG of that id.
    fn dag(&mut self, dag_id: &str) -> anyhow::Result<Option<DagJson>>;
    /// Every asset related to the DAG (all pages).
    fn assets(&mut self, dag_id: &str) -> anyhow::Result<Vec<AssetJson>>;
    /// The DAG's tasks.
    fn tasks(&mut self, dag_id: &str) -> anyhow::Result<Vec<TaskJson>>;
}

/// The operators `replaysafe.airflow`'s cluster policy gates, by class name, and the effect
/// kind each journals (`GATED_OPERATORS` in `bindings/python/python/replaysafe/airflow.py`).
pub(crate) const GATED_OPERATORS: [(&str, &str); 5] = [
    ("EmailOperator", "email"),
    ("HttpOperator", "webhook"),
    ("SlackWebhookOperator", "alert"),
    ("SFTPOperator", "file_drop"),
    ("TriggerDagRunOperator", "trigger"),
];

/// The policy matches a class by name when it comes from Airflow's providers.
const PROVIDERS: &str = "airflow.providers.";

/// What the walk found.
#[derive(Debug)]
pub(crate) struct Walked {
    /// The DAGs, the backfilled one first, then by distance from it.
    pub(crate) dags: Vec<PlannedDag>,
    /// Links that lead back to a DAG already upstream: not followed again.
    pub(crate) cycles: Vec<Cycle>,
    /// Things the reader should know (a trigger target Airflow does not know, say).
    pub(crate) notes: Vec<String>,
}

/// A link of the graph: `from` starts `to`.
#[derive(Clone, Debug)]
struct Link {
    from: String,
    to: String,
    via: Via,
}

/// Walks from `root` (which runs `runs` times) along the assets each DAG updates and the
/// DAGs its TriggerDagRunOperators start, each DAG once, and counts the runs of each.
///
/// A DAG scheduled on assets that one DAG updates gets up to one run per run of that DAG
/// (Airflow may batch asset events into fewer runs), however many of them it updates; a
/// DAG started by a TriggerDagRunOperator gets one run per run of the DAG holding it.
/// Links into a DAG already upstream (a cycle) are reported and not counted.
pub(crate) fn walk(
    source: &mut dyn Source,
    triggers: &Triggers,
    root: DagJson,
    runs: u64,
) -> anyhow::Result<Walked> {
    let root_id = root.dag_id.clone();
    let mut found: Vec<(DagJson, usize)> = vec![(root, 0)];
    let mut index: HashMap<String, usize> = HashMap::from([(root_id.clone(), 0)]);
    let root = root_id.as_str();
    let mut missing: BTreeSet<String> = BTreeSet::new();
    let mut links: Vec<Link> = Vec::new();
    let mut tasks: HashMap<String, Vec<TaskJson>> = HashMap::new();
    let mut notes = Vec::new();
    let mut queue = VecDeque::from([0]);
    while let Some(at) = queue.pop_front() {
        let (dag_id, depth) = (found[at].0.dag_id.clone(), found[at].1);
        let mut out: Vec<Link> = Vec::new();
        for asset in source.assets(&dag_id)? {
            if !asset
                .producing_tasks
                .iter()
                .any(|task| task.dag_id == dag_id)
            {
                continue;
            }
            for scheduled in &asset.scheduled_dags {
                out.push(Link {
                    from: dag_id.clone(),
                    to: scheduled.dag_id.clone(),
                    via: Via::Asset {
                        asset: asset.name.clone(),
                    },
                });
            }
        }
        for (task_id, target) in triggers.of(&dag_id) {
            out.push(Link {
                from: dag_id.clone(),
                to: target.clone(),
                via: Via::Trigger {
                    task_id: task_id.clone(),
                },
            });
        }
        for link in out {
            if !index.contains_key(&link.to) {
                if missing.contains(&link.to) {
                    continue;
                }
                let Some(dag) = source.dag(&link.to)? else {
                    let how = match &link.via {
                        Via::Asset { asset } => {
                            format!("asset {asset} of {} schedules {}", link.from, link.to)
                        }
                        Via::Trigger { task_id } => {
                            format!("{}.{task_id} starts {}", link.from, link.to)
                        }
                    };
                    notes.push(format!(
                        "{how}, a DAG Airflow does not have (a templated trigger_dag_id?): not followed"
                    ));
                    missing.insert(link.to.clone());
                    continue;
                };
                index.insert(link.to.clone(), found.len());
                queue.push_back(found.len());
                found.push((dag, depth + 1));
            }
            links.push(link);
        }
        tasks.insert(dag_id.clone(), source.tasks(&dag_id)?);
    }

    let order: Vec<String> = found.iter().map(|(dag, _)| dag.dag_id.clone()).collect();
    let (kept, cycles) = split_cycles(root, &order, links);
    let counts = count(root, runs, &order, &kept);
    // With the policy installed, every TriggerDagRunOperator here runs in the backfill or
    // downstream of it, so it is suppressed: only assets carry the backfill on.
    let by_assets: Vec<Link> = kept
        .iter()
        .filter(|link| matches!(link.via, Via::Asset { .. }))
        .cloned()
        .collect();
    let counts_with_policy = count(root, runs, &order, &by_assets);
    // A DAG a cycle starts again, or a mapped trigger starts once per map index, gets more
    // runs than counted; so does everything downstream of it.
    let mapped = |link: &Link| match &link.via {
        Via::Trigger { task_id } => tasks.get(&link.from).is_some_and(|tasks| {
            tasks
                .iter()
                .any(|task| &task.task_id == task_id && task.is_mapped == Some(true))
        }),
        Via::Asset { .. } => false,
    };
    let unbounded_starts: Vec<&str> = cycles
        .iter()
        .map(|cycle| cycle.starts.as_str())
        .chain(
            kept.iter()
                .filter(|link| mapped(link))
                .map(|link| link.to.as_str()),
        )
        .collect();
    let at_least = downstream_of(&unbounded_starts, &kept);
    let asset_cycles: Vec<&str> = cycles
        .iter()
        .filter(|cycle| matches!(cycle.via, Via::Asset { .. }))
        .map(|cycle| cycle.starts.as_str())
        .collect();
    let at_least_with_policy = downstream_of(&asset_cycles, &by_assets);
    let dags = found
        .into_iter()
        .map(|(dag, depth)| {
            let (runs, up_to) = counts.get(&dag.dag_id).copied().unwrap_or((0, false));
            let (runs_with_policy, _) = counts_with_policy
                .get(&dag.dag_id)
                .copied()
                .unwrap_or((0, false));
            let started_by = kept
                .iter()
                .filter(|link| link.to == dag.dag_id)
                .map(|link| StartedBy {
                    dag_id: link.from.clone(),
                    via: link.via.clone(),
                })
                .collect();
            let starts: Vec<&(String, String)> = triggers.of(&dag.dag_id).iter().collect();
            let tasks = tasks
                .remove(&dag.dag_id)
                .unwrap_or_default()
                .into_iter()
                .map(|task| classify(task, &starts))
                .collect();
            PlannedDag {
                at_least: at_least.contains(&dag.dag_id),
                at_least_with_policy: at_least_with_policy.contains(&dag.dag_id),
                dag_id: dag.dag_id,
                depth,
                runs,
                up_to,
                runs_with_policy,
                paused: dag.is_paused,
                schedule: dag.timetable_summary,
                started_by,
                tasks,
            }
        })
        .collect();
    Ok(Walked {
        dags,
        cycles,
        notes,
    })
}

/// Splits the links into those that keep the graph acyclic and those that close a cycle
/// (a link into a DAG on the current depth-first path from `root`).
fn split_cycles(root: &str, order: &[String], links: Vec<Link>) -> (Vec<Link>, Vec<Cycle>) {
    let position: HashMap<&str, usize> = order
        .iter()
        .enumerate()
        .map(|(at, dag)| (dag.as_str(), at))
        .collect();
    let mut out: Vec<Vec<usize>> = vec![Vec::new(); order.len()];
    for (at, link) in links.iter().enumerate() {
        if let Some(from) = position.get(link.from.as_str()) {
            out[*from].push(at);
        }
    }
    // Iterative depth-first search: 0 unseen, 1 on the path, 2 done.
    let mut state = vec![0_u8; order.len()];
    let mut back = vec![false; links.len()];
    let Some(start) = position.get(root).copied() else {
        return (links, Vec::new());
    };
    let mut stack: Vec<(usize, usize)> = vec![(start, 0)];
    state[start] = 1;
    while let Some((node, next)) = stack.last_mut() {
        let node = *node;
        if let Some(&link) = out[node].get(*next) {
            *next += 1;
            let Some(&to) = position.get(links[link].to.as_str()) else {
                continue;
            };
            match state[to] {
                0 => {
                    state[to] = 1;
                    stack.push((to, 0));
                }
                1 => back[link] = true,
                _ => {}
            }
        } else {
            state[node] = 2;
            stack.pop();
        }
    }
    let mut kept = Vec::new();
    let mut cycles = Vec::new();
    for (link, is_back) in links.into_iter().zip(back) {
        if is_back {
            cycles.push(Cycle {
                dag_id: link.from,
                starts: link.to,
                via: link.via,
            });
        } else {
            kept.push(link);
        }
    }
    (kept, cycles)
}

/// `starts` and every DAG the `links` lead to from them.
fn downstream_of(starts: &[&str], links: &[Link]) -> BTreeSet<String> {
    let mut reached: BTreeSet<String> = starts.iter().map(|dag| (*dag).to_owned()).collect();
    let mut queue: VecDeque<String> = reached.iter().cloned().collect();
    while let Some(dag) = queue.pop_front() {
        for link in links.iter().filter(|link| link.from == dag) {
            if reached.insert(link.to.clone()) {
                queue.push_back(link.to.clone());
            }
        }
    }
    reached
}

/// The runs of every DAG, in topological order of the acyclic `links`: the sum over the
/// DAGs that start it (once per DAG for assets, once per task for triggers), and whether
/// that is an upper bound.
fn count(root: &str, runs: u64, order: &[String], links: &[Link]) -> HashMap<String, (u64, bool)> {
    let mut incoming: HashMap<&str, usize> = order.iter().map(|dag| (dag.as_str(), 0)).collect();
    for link in links {
        *incoming.entry(link.to.as_str()).or_default() += 1;
    }
    let mut counts: HashMap<String, (u64, bool)> = HashMap::new();
    let mut ready: VecDeque<&str> = VecDeque::from([root]);
    counts.insert(root.to_owned(), (runs, false));
    // What each DAG has received so far: the triggers' runs, and per upstream DAG whether
    // an asset it updates schedules this one.
    let mut asset_sources: HashMap<&str, BTreeSet<&str>> = HashMap::new();
    while let Some(dag) = ready.pop_front() {
        let (dag_runs, dag_up_to) = counts.get(dag).copied().unwrap_or((0, false));
        for link in links.iter().filter(|link| link.from == dag) {
            let entry = counts.entry(link.to.clone()).or_insert((0, false));
            match &link.via {
                Via::Asset { .. } => {
                    if asset_sources
                        .entry(link.to.as_str())
                        .or_default()
                        .insert(link.from.as_str())
                    {
                        entry.0 = entry.0.saturating_add(dag_runs);
                    }
                    entry.1 = true;
                }
                Via::Trigger { .. } => {
                    entry.0 = entry.0.saturating_add(dag_runs);
                    entry.1 |= dag_up_to;
                }
            }
            if let Some(left) = incoming.get_mut(link.to.as_str()) {
                *left -= 1;
                if *left == 0 {
                    ready.push_back(link.to.as_str());
                }
            }
        }
    }
    counts
}

/// A task as the plan shows it: whether the policy gates its operator.
fn classify(task: TaskJson, starts: &[&(String, String)]) -> PlannedTask {
    let class_ref = task.class_ref.unwrap_or_default();
    let class_name = class_ref.class_name.clone();
    let operator = task
        .operator_name
        .clone()
        .or_else(|| class_name.clone())
        .unwrap_or_else(|| "unknown".to_owned());
    let class = match (&class_ref.module_path, &class_ref.class_name) {
        (Some(module), Some(name)) => Some(format!("{module}.{name}")),
        (None, Some(name)) => Some(name.clone()),
        _ => None,
    };
    let from_providers = class_ref
        .module_path
        .as_deref()
        .is_some_and(|module| module.starts_with(PROVIDERS));
    let named = class_name
        .as_deref()
        .and_then(|name| GATED_OPERATORS.iter().find(|(gated, _)| *gated == name));
    let effect_kind = named.filter(|_| from_providers).map(|(_, kind)| *kind);
    let task_starts: Vec<String> = starts
        .iter()
        .filter(|(task_id, _)| *task_id == task.task_id)
        .map(|(_, target)| target.clone())
        .collect();
    let note = match (effect_kind, named) {
        (Some("trigger"), _) if task_starts.is_empty() => {
            "gated (trigger): suppressed in a replay; Airflow does not say which DAG it starts"
                .to_owned()
        }
        (Some("trigger"), _) => format!(
            "gated (trigger): suppressed in a replay; starts {}",
            task_starts.join(", ")
        ),
        (Some("file_drop"), _) => {
            "gated (file_drop): an upload (operation put) is suppressed in a replay".to_owned()
        }
        (Some(kind), _) => format!("gated ({kind}): suppressed in a replay"),
        (None, Some((name, _))) => format!(
            "not gated: the policy gates {name} from {PROVIDERS}* only; gated only if it calls replaysafe itself"
        ),
        (None, None) if class_name.as_deref() == Some("EmptyOperator") => {
            "not gated; sends nothing".to_owned()
        }
        (None, None) => {
            "not gated by the policy; gated only if it calls replaysafe itself".to_owned()
        }
    };
    PlannedTask {
        task_id: task.task_id,
        operator,
        class,
        gated: effect_kind.is_some(),
        effect_kind: effect_kind.map(str::to_owned),
        mapped: task.is_mapped.unwrap_or(false),
        starts: task_starts,
        note,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Airflow's answers read from JSON, keyed by DAG: fixtures saved from a real Airflow
    /// 3.3.2 running `xtask/airflow/dags/replaysafe_platform.py`, or made up in that shape.
    #[derive(Default)]
    struct Fixtures {
        dags: HashMap<String, String>,
        assets: HashMap<String, String>,
        tasks: HashMap<String, String>,
        asked: Vec<String>,
    }

    impl Fixtures {
        fn with(mut self, dag: &str, detail: &str, assets: &str, tasks: &str) -> Self {
            self.dags.insert(dag.to_owned(), detail.to_owned());
            self.assets.insert(dag.to_owned(), assets.to_owned());
            self.tasks.insert(dag.to_owned(), tasks.to_owned());
            self
        }
    }

    impl Source for Fixtures {
        fn dag(&mut self, dag_id: &str) -> anyhow::Result<Option<DagJson>> {
            self.asked.push(format!("dag {dag_id}"));
            self.dags
                .get(dag_id)
                .map(|text| serde_json::from_str(text))
                .transpose()
                .map_err(Into::into)
        }

        fn assets(&mut self, dag_id: &str) -> anyhow::Result<Vec<AssetJson>> {
            self.asked.push(format!("assets {dag_id}"));
            let text = self.assets.get(dag_id).map_or(EMPTY_ASSETS, String::as_str);
            Ok(serde_json::from_str::<AssetPage>(text)?.assets)
        }

        fn tasks(&mut self, dag_id: &str) -> anyhow::Result<Vec<TaskJson>> {
            self.asked.push(format!("tasks {dag_id}"));
            let text = self.tasks.get(dag_id).map_or(EMPTY_TASKS, String::as_str);
            Ok(serde_json::from_str::<TaskPage>(text)?.tasks)
        }
    }

    const EMPTY_ASSETS: &str = r#"{"assets": [], "total_entries": 0}"#;
    const EMPTY_TASKS: &str = r#"{"tasks": [], "total_entries": 0}"#;

    /// The platform DAGs as the real server described them.
    fn platform() -> Fixtures {
        Fixtures::default()
            .with(
                "replaysafe_producer",
                include_str!("fixtures/dag_replaysafe_producer.json"),
                include_str!("fixtures/assets_replaysafe_producer.json"),
                include_str!("fixtures/tasks_replaysafe_producer.json"),
            )
            .with(
                "replaysafe_consumer",
                include_str!("fixtures/dag_replaysafe_consumer.json"),
                include_str!("fixtures/assets_replaysafe_consumer.json"),
                include_str!("fixtures/tasks_replaysafe_consumer.json"),
            )
            .with(
                "replaysafe_report",
                include_str!("fixtures/dag_replaysafe_report.json"),
                include_str!("fixtures/assets_replaysafe_report.json"),
                include_str!("fixtures/tasks_replaysafe_report.json"),
            )
    }

    fn platform_triggers() -> Triggers {
        let graph: DependencyGraph =
            serde_json::from_str(include_str!("fixtures/dependencies.json")).unwrap();
        Triggers::from_graph(&graph)
    }

    fn dag<'a>(walked: &'a Walked, dag_id: &str) -> &'a PlannedDag {
        walked
            .dags
            .iter()
            .find(|dag| dag.dag_id == dag_id)
            .unwrap_or_else(|| panic!("{dag_id} not in {:?}", walked.dags))
    }

    fn task<'a>(dag: &'a PlannedDag, task_id: &str) -> &'a PlannedTask {
        dag.tasks
            .iter()
            .find(|task| task.task_id == task_id)
            .unwrap_or_else(|| panic!("{task_id} not in {}", dag.dag_id))
    }

    #[test]
    fn the_ui_graph_names_each_trigger_task_and_its_target() {
        let triggers = platform_triggers();
        assert_eq!(
            triggers.of("replaysafe_consumer"),
            [("start_report".to_owned(), "replaysafe_report".to_owned())]
        );
        assert_eq!(
            triggers.of("replaysafe_policy"),
            [("trigger".to_owned(), "replaysafe_report".to_owned())]
        );
        assert!(triggers.of("replaysafe_producer").is_empty());
    }

    #[test]
    fn the_platform_chain_is_walked_from_the_producer() {
        let mut source = platform();
        let root = source.dag("replaysafe_producer").unwrap().unwrap();
        let walked = walk(&mut source, &platform_triggers(), root, 3).unwrap();
        let order: Vec<(&str, usize, u64, bool, u64)> = walked
            .dags
            .iter()
            .map(|dag| {
                let counted = (dag.runs, dag.up_to, dag.runs_with_policy);
                (
                    dag.dag_id.as_str(),
                    dag.depth,
                    counted.0,
                    counted.1,
                    counted.2,
                )
            })
            .collect();
        // With the policy, start_report starts nothing: the report gets no run.
        assert_eq!(
            order,
            [
                ("replaysafe_producer", 0, 3, false, 3),
                ("replaysafe_consumer", 1, 3, true, 3),
                ("replaysafe_report", 2, 3, true, 0),
            ]
        );
        // replaysafe_policy also triggers the report, but is not downstream of the producer.
        assert!(!source.asked.iter().any(|asked| asked.contains("policy")));
        assert!(walked.cycles.is_empty() && walked.notes.is_empty());

        let consumer = dag(&walked, "replaysafe_consumer");
        assert_eq!(
            consumer.started_by,
            [StartedBy {
                dag_id: "replaysafe_producer".into(),
                via: Via::Asset {
                    asset: "replaysafe_orders".into()
                }
            }]
        );
        assert!(consumer.paused);
        assert_eq!(consumer.schedule.as_deref(), Some("Asset"));
        let start_report = task(consumer, "start_report");
        assert!(start_report.gated);
        assert_eq!(start_report.effect_kind.as_deref(), Some("trigger"));
        assert_eq!(start_report.starts, ["replaysafe_report"]);
        for ungated in ["notify_cli", "notify_python"] {
            let task = task(consumer, ungated);
            assert!(!task.gated, "{ungated}");
            assert_eq!(
                task.note,
                "not gated by the policy; gated only if it calls replaysafe itself"
            );
        }
        assert_eq!(task(consumer, "notify_cli").operator, "BashOperator");

        let report = dag(&walked, "replaysafe_report");
        assert_eq!(
            report.started_by,
            [StartedBy {
                dag_id: "replaysafe_consumer".into(),
                via: Via::Trigger {
                    task_id: "start_report".into()
                }
            }]
        );
        let mail = task(report, "mail_report");
        assert!(mail.gated);
        assert_eq!(mail.effect_kind.as_deref(), Some("email"));
        assert_eq!(
            mail.class.as_deref(),
            Some("airflow.providers.smtp.operators.smtp.EmailOperator")
        );
        let assemble = task(report, "assemble");
        assert!(!assemble.gated);
        assert_eq!(assemble.note, "not gated; sends nothing");

        let producer = dag(&walked, "replaysafe_producer");
        assert!(producer.started_by.is_empty());
        assert!(!task(producer, "publish").gated);
    }

    #[test]
    fn every_operator_the_policy_gates_is_gated_by_class() {
        let tasks: TaskPage =
            serde_json::from_str(include_str!("fixtures/tasks_replaysafe_policy.json")).unwrap();
        let trigger = ("trigger".to_owned(), "replaysafe_report".to_owned());
        let kinds: BTreeMap<String, Option<String>> = tasks
            .tasks
            .into_iter()
            .map(|task| classify(task, &[&trigger]))
            .map(|task| (task.task_id, task.effect_kind))
            .collect();
        let expected: BTreeMap<String, Option<String>> = [
            ("email", Some("email")),
            ("http", Some("webhook")),
            ("slack", Some("alert")),
            ("sftp", Some("file_drop")),
            ("trigger", Some("trigger")),
            ("fail", None),
        ]
        .into_iter()
        .map(|(task, kind)| (task.to_owned(), kind.map(str::to_owned)))
        .collect();
        assert_eq!(kinds, expected);
    }

    #[test]
    fn a_class_named_like_a_gated_one_outside_the_providers_is_not_gated() {
        let task: TaskJson = serde_json::from_value(serde_json::json!({
            "task_id": "mail",
            "operator_name": "EmailOperator",
            "class_ref": {"module_path": "company.operators", "class_name": "EmailOperator"},
            "is_mapped": true,
        }))
        .unwrap();
        let planned = classify(task, &[]);
        assert!(!planned.gated && planned.mapped);
        assert!(planned.note.contains("from airflow.providers.* only"));
    }

    /// Made-up DAGs in the server's shapes: `a` updates asset `x`, on which `b` is
    /// scheduled; `b` triggers `c` twice (two tasks) and `a` (a cycle); `a` also triggers
    /// `c` and a DAG Airflow does not know.
    fn made_up() -> (Fixtures, Triggers) {
        let detail = |dag: &str| serde_json::json!({"dag_id": dag, "is_paused": false}).to_string();
        let asset = serde_json::json!({
            "assets": [{
                "name": "x",
                "producing_tasks": [{"dag_id": "a", "task_id": "write"}],
                "scheduled_dags": [{"dag_id": "b"}],
            }],
            "total_entries": 1,
        })
        .to_string();
        let fixtures = Fixtures::default()
            .with("a", &detail("a"), &asset, EMPTY_TASKS)
            .with("b", &detail("b"), &asset, EMPTY_TASKS)
            .with("c", &detail("c"), EMPTY_ASSETS, EMPTY_TASKS);
        let trigger = |from: &str, to: &str, task: &str| {
            let node = format!("trigger:{from}:{to}:{task}");
            (
                serde_json::json!({"id": node, "label": task, "type": "trigger"}),
                [
                    serde_json::json!({"source_id": format!("dag:{from}"), "target_id": node}),
                    serde_json::json!({"source_id": node, "target_id": format!("dag:{to}")}),
                ],
            )
        };
        let mut nodes = Vec::new();
        let mut edges = Vec::new();
        for (from, to, task) in [
            ("b", "c", "first"),
            ("b", "c", "second"),
            ("b", "a", "again"),
            ("a", "c", "direct"),
            ("a", "{{ params.target }}", "templated"),
        ] {
            let (node, pair) = trigger(from, to, task);
            nodes.push(node);
            edges.extend(pair);
        }
        let graph: DependencyGraph =
            serde_json::from_value(serde_json::json!({"nodes": nodes, "edges": edges})).unwrap();
        (fixtures, Triggers::from_graph(&graph))
    }

    #[test]
    fn counts_add_up_over_every_path_and_cycles_are_not_followed() {
        let (mut source, triggers) = made_up();
        let root = source.dag("a").unwrap().unwrap();
        let walked = walk(&mut source, &triggers, root, 4).unwrap();
        let counts: Vec<(&str, u64, bool, u64)> = walked
            .dags
            .iter()
            .map(|dag| {
                (
                    dag.dag_id.as_str(),
                    dag.runs,
                    dag.up_to,
                    dag.runs_with_policy,
                )
            })
            .collect();
        // c: 4 from a's trigger, up to 4 + 4 from b's two triggers; none with the policy.
        assert_eq!(
            counts,
            [("a", 4, false, 4), ("b", 4, true, 4), ("c", 12, true, 0)]
        );
        assert_eq!(walked.cycles.len(), 1);
        let cycle = &walked.cycles[0];
        assert_eq!((cycle.dag_id.as_str(), cycle.starts.as_str()), ("b", "a"));
        // The cycle starts a again, and so b and c: every count is a lower bound; with
        // the policy the cycle (a trigger) is suppressed and the counts stand.
        let bounds: Vec<(bool, bool)> = walked
            .dags
            .iter()
            .map(|dag| (dag.at_least, dag.at_least_with_policy))
            .collect();
        assert_eq!(bounds, [(true, false), (true, false), (true, false)]);
        assert_eq!(walked.notes.len(), 1, "{:?}", walked.notes);
        assert!(walked.notes[0].contains("{{ params.target }}"));
        // Each DAG is asked about once.
        let asked_tasks = source
            .asked
            .iter()
            .filter(|a| a.starts_with("tasks "))
            .count();
        assert_eq!(asked_tasks, 3);
    }

    #[test]
    fn a_mapped_trigger_makes_its_targets_count_a_lower_bound() {
        let detail = |dag: &str| serde_json::json!({"dag_id": dag, "is_paused": false}).to_string();
        let tasks = serde_json::json!({"tasks": [{
            "task_id": "fanout",
            "operator_name": "TriggerDagRunOperator",
            "class_ref": {"module_path": "airflow.providers.standard.operators.trigger_dagrun",
                          "class_name": "TriggerDagRunOperator"},
            "is_mapped": true,
        }], "total_entries": 1})
        .to_string();
        let mut source = Fixtures::default()
            .with("a", &detail("a"), EMPTY_ASSETS, &tasks)
            .with("c", &detail("c"), EMPTY_ASSETS, EMPTY_TASKS);
        let node = "trigger:a:c:fanout";
        let graph: DependencyGraph = serde_json::from_value(serde_json::json!({
            "nodes": [{"id": node, "label": "fanout", "type": "trigger"}],
            "edges": [{"source_id": "dag:a", "target_id": node}, {"source_id": node, "target_id": "dag:c"}],
        }))
        .unwrap();
        let root = source.dag("a").unwrap().unwrap();
        let walked = walk(&mut source, &Triggers::from_graph(&graph), root, 3).unwrap();
        let c = walked.dags.iter().find(|dag| dag.dag_id == "c").unwrap();
        assert_eq!((c.runs, c.at_least), (3, true));
        let a = walked.dags.iter().find(|dag| dag.dag_id == "a").unwrap();
        assert!(!a.at_least);
    }

    #[test]
    fn a_dag_that_updates_several_assets_of_one_consumer_counts_once() {
        let asset = |name: &str| {
            serde_json::json!({
                "name": name,
                "producing_tasks": [{"dag_id": "a", "task_id": "write"}],
                "scheduled_dags": [{"dag_id": "b"}],
            })
        };
        let assets = serde_json::json!({
            "assets": [asset("x"), asset("y")],
            "total_entries": 2,
        })
        .to_string();
        let detail = |dag: &str| serde_json::json!({"dag_id": dag, "is_paused": true}).to_string();
        let mut source = Fixtures::default()
            .with("a", &detail("a"), &assets, EMPTY_TASKS)
            .with("b", &detail("b"), &assets, EMPTY_TASKS);
        let root = source.dag("a").unwrap().unwrap();
        let walked = walk(&mut source, &Triggers::default(), root, 5).unwrap();
        let b = dag(&walked, "b");
        assert_eq!((b.runs, b.up_to), (5, true));
        assert_eq!(b.started_by.len(), 2);
    }

    #[test]
    fn the_dry_run_answer_reads_as_logical_dates() {
        let dry_run: DryRun = serde_json::from_str(include_str!("fixtures/dry_run.json")).unwrap();
        let dates: Vec<String> = dry_run
            .backfills
            .iter()
            .map(|run| replaysafe_core::rfc3339(run.logical_date.unwrap()))
            .collect();
        assert_eq!(
            dates,
            [
                "2026-11-27T00:00:00Z",
                "2026-11-28T00:00:00Z",
                "2026-11-29T00:00:00Z"
            ]
        );
        assert!(dry_run.backfills[0].partition_key.is_none());
    }
}
