//! `cargo xtask bench`: runs every benchmark and gathers `target/bench/summary.json`.
//!
//! Each benchmark binary (harness = false) writes `target/bench/<name>.json`: figures
//! with a value and a unit, and for ratios the baseline measured in the same run. The
//! Python API's benchmark (`bindings/python/benches/bench.py`) runs last, against the
//! release wheel, and writes `python.json` in the same format.

use std::collections::BTreeMap;

use anyhow::Context;

use crate::system::{cargo, exec, target_dir};

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    let out = target_dir().join("bench");
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out)?;
    let services = crate::services::start(&[])?;
    let mut command = cargo();
    command
        .args(["bench", "--workspace", "--all-features", "--bench", "*"])
        .args(args)
        .envs(services.env())
        .env("REPLAYSAFE_BENCH_OUT", &out);
    exec(&mut command)?;
    drop(services);
    crate::dist::python_bench(&out)?;

    let mut summary = BTreeMap::new();
    for entry in std::fs::read_dir(&out)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "json")
            && path.file_name().is_some_and(|n| n != "summary.json")
        {
            let text = std::fs::read_to_string(&path)?;
            let figures: BTreeMap<String, serde_json::Value> = serde_json::from_str(&text)
                .with_context(|| format!("reading {}", path.display()))?;
            summary.extend(figures);
        }
    }
    let summary_path = out.join("summary.json");
    std::fs::write(
        &summary_path,
        serde_json::to_string_pretty(&summary)? + "\n",
    )?;
    println!("\nbenchmark summary ({}):", summary_path.display());
    for (name, figure) in &summary {
        let value = figure["value"].as_f64().unwrap_or(f64::NAN);
        let unit = figure["unit"].as_str().unwrap_or("");
        match figure.get("baseline").and_then(|b| b.as_str()) {
            Some(baseline) => println!("  {name:<48} {value:>14.3} {unit} (baseline: {baseline})"),
            None => println!("  {name:<48} {value:>14.3} {unit}"),
        }
    }
    Ok(())
}
