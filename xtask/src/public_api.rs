//! `cargo xtask public-api [--bless]`: the public API of every published crate, as one
//! line per item, checked against `crates/<crate>/public-api.txt`, so that an accidental
//! export (or a removal) fails CI until the snapshot is written again on purpose.
//!
//! The list comes from rustdoc's JSON output (`--output-format json`, which needs
//! `RUSTC_BOOTSTRAP=1` on a stable toolchain): the items reachable from the crate root
//! through public modules and `pub use`, public fields, enum variants, trait methods,
//! inherent methods, and the traits implemented by hand (auto traits and blanket impls
//! are left out: they follow from the rest).

use std::collections::{BTreeSet, HashSet};
use std::path::PathBuf;

use anyhow::{Context, bail};
use serde_json::Value;

use crate::system::{cargo, exec, root, target_dir};

/// The published crates, with the features their API is checked with.
pub(crate) const CRATES: [(&str, &[&str]); 11] = [
    ("replaysafe-core", &[]),
    ("replaysafe-http", &[]),
    ("replaysafe-webhook", &[]),
    ("replaysafe-email", &[]),
    ("replaysafe-sftp", &[]),
    ("replaysafe-metrics", &[]),
    ("replaysafe-alert", &[]),
    ("replaysafe-outbox", &["postgres"]),
    ("replaysafe-test", &[]),
    ("replaysafe-review", &[]),
    ("replaysafe", &["full", "testing"]),
];

pub(crate) fn run(args: &[String]) -> anyhow::Result<()> {
    let bless = match args {
        [] => false,
        [flag] if flag == "--bless" => true,
        _ => bail!("usage: cargo xtask public-api [--bless]"),
    };
    check(bless)
}

/// Checks (or, with `bless`, writes) every crate's snapshot.
pub(crate) fn check(bless: bool) -> anyhow::Result<()> {
    let mut differing = Vec::new();
    for (krate, features) in CRATES {
        if !root().join("crates").join(krate).exists() {
            continue;
        }
        let api = public_api(krate, features)?;
        let snapshot = root().join("crates").join(krate).join("public-api.txt");
        let text = api
            .iter()
            .map(|line| format!("{line}\n"))
            .collect::<String>();
        let written = std::fs::read_to_string(&snapshot).unwrap_or_default();
        if written == text {
            continue;
        }
        if bless {
            std::fs::write(&snapshot, &text)
                .with_context(|| format!("writing {}", snapshot.display()))?;
            eprintln!("xtask public-api: wrote {}", snapshot.display());
            continue;
        }
        let old: BTreeSet<&str> = written.lines().collect();
        let new: BTreeSet<&str> = text.lines().collect();
        for added in new.difference(&old) {
            eprintln!("xtask public-api: {krate}: + {added}");
        }
        for removed in old.difference(&new) {
            eprintln!("xtask public-api: {krate}: - {removed}");
        }
        differing.push(krate);
    }
    if !differing.is_empty() {
        bail!(
            "the public API of {} changed; if that is intended, run `cargo xtask public-api --bless` and commit the snapshots",
            differing.join(", ")
        );
    }
    Ok(())
}

/// The public API of `krate`, one sorted line per item.
fn public_api(krate: &str, features: &[&str]) -> anyhow::Result<BTreeSet<String>> {
    let mut command = cargo();
    command
        .env("RUSTC_BOOTSTRAP", "1")
        .args(["rustdoc", "--quiet", "--lib", "-p", krate]);
    if !features.is_empty() {
        command.args(["--features", &features.join(",")]);
    }
    command.args(["--", "-Z", "unstable-options", "--output-format", "json"]);
    exec(&mut command)?;
    let path: PathBuf = target_dir()
        .join("doc")
        .join(format!("{}.json", krate.replace('-', "_")));
    let text =
        std::fs::read_to_string(&path).with_context(|| format!("reading {}", path.display()))?;
    let doc: Value = serde_json::from_str(&text).context("parsing rustdoc JSON")?;
    let mut api = Api {
        doc: &doc,
        lines: BTreeSet::new(),
        seen: HashSet::new(),
    };
    let root = doc["root"].to_string();
    let name = krate.replace('-', "_");
    api.module(&root, &name);
    Ok(api.lines)
}

struct Api<'a> {
    doc: &'a Value,
    lines: BTreeSet<String>,
    /// (item, path) pairs already listed: a re-export cycle ends here.
    seen: HashSet<(String, String)>,
}

impl Api<'_> {
    fn item(&self, id: &str) -> Option<&Value> {
        self.doc["index"].get(id)
    }

    fn is_public(item: &Value) -> bool {
        item["visibility"] == "public"
    }

    fn module(&mut self, id: &str, path: &str) {
        if !self.seen.insert((id.to_owned(), path.to_owned())) {
            return;
        }
        let Some(module) = self.item(id).cloned() else {
            return;
        };
        let items = module["inner"]["module"]["items"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for child in items {
            let child = child.to_string();
            let Some(item) = self.item(&child).cloned() else {
                continue;
            };
            if !Self::is_public(&item) {
                continue;
            }
            if let Some(import) = item["inner"].get("use") {
                let target = import["id"].to_string();
                if import["is_glob"] == true {
                    self.module(&target, path);
                    continue;
                }
                let name = import["name"].as_str().unwrap_or_default();
                let at = format!("{path}::{name}");
                match self.item(&target).cloned() {
                    Some(target_item) => self.describe(&target, &target_item, &at),
                    None => {
                        let source = import["source"].as_str().unwrap_or_default();
                        self.lines.insert(format!("use {at} = {source}"));
                    }
                }
                continue;
            }
            let name = item["name"].as_str().unwrap_or_default().to_owned();
            self.describe(&child, &item, &format!("{path}::{name}"));
        }
    }

    fn describe(&mut self, id: &str, item: &Value, path: &str) {
        let Some((kind, inner)) = item["inner"].as_object().and_then(|o| o.iter().next()) else {
            return;
        };
        match kind.as_str() {
            "module" => {
                self.lines.insert(format!("mod {path}"));
                self.module(id, path);
            }
            "struct" => {
                self.lines.insert(format!("struct {path}"));
                for field in inner["kind"]["plain"]["fields"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    if let Some(field) = self.item(&field.to_string())
                        && Self::is_public(field)
                    {
                        let name = field["name"].as_str().unwrap_or_default();
                        self.lines.insert(format!("field {path}.{name}"));
                    }
                }
                self.impls(inner, path);
            }
            "enum" => {
                self.lines.insert(format!("enum {path}"));
                for variant in inner["variants"].as_array().into_iter().flatten() {
                    if let Some(variant) = self.item(&variant.to_string()) {
                        let name = variant["name"].as_str().unwrap_or_default();
                        self.lines.insert(format!("variant {path}::{name}"));
                    }
                }
                self.impls(inner, path);
            }
            "trait" => {
                self.lines.insert(format!("trait {path}"));
                for member in inner["items"].as_array().into_iter().flatten() {
                    if let Some(member) = self.item(&member.to_string()) {
                        let name = member["name"].as_str().unwrap_or_default();
                        self.lines.insert(format!("trait item {path}::{name}"));
                    }
                }
            }
            other => {
                let word = match other {
                    "function" => "fn",
                    "constant" => "const",
                    "static" => "static",
                    "type_alias" => "type",
                    "macro" => "macro",
                    "union" => "union",
                    other => other,
                };
                self.lines.insert(format!("{word} {path}"));
            }
        }
    }

    /// Inherent public methods and traits implemented by hand.
    fn impls(&mut self, inner: &Value, path: &str) {
        for implementation in inner["impls"].as_array().into_iter().flatten() {
            let Some(implementation) = self.item(&implementation.to_string()).cloned() else {
                continue;
            };
            let block = &implementation["inner"]["impl"];
            if block["is_synthetic"] == true || !block["blanket_impl"].is_null() {
                continue;
            }
            match block["trait"].as_object() {
                Some(to) => {
                    let name = to.get("path").and_then(Value::as_str).unwrap_or_default();
                    self.lines.insert(format!("impl {name} for {path}"));
                }
                None => {
                    for method in block["items"].as_array().into_iter().flatten() {
                        if let Some(method) = self.item(&method.to_string())
                            && Self::is_public(method)
                        {
                            let name = method["name"].as_str().unwrap_or_default();
                            self.lines.insert(format!("fn {path}::{name}"));
                        }
                    }
                }
            }
        }
    }
}
