//! Tidy checks, run as ordinary tests by `cargo test` (and so by `cargo xtask ci`).

use std::path::{Path, PathBuf};

use crate::system::root;

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() && path.file_name().is_some_and(|n| n != "target") {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn library_roots() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = std::fs::read_dir(root().join("crates"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("src/lib.rs"))
        .filter(|p| p.exists())
        .collect();
    roots.sort();
    roots
}

#[test]
fn every_library_forbids_unsafe_and_warns_on_missing_docs() {
    for lib in library_roots() {
        let text = std::fs::read_to_string(&lib).unwrap();
        for attribute in [
            "#![forbid(unsafe_code)]",
            "#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]",
        ] {
            assert!(
                text.contains(attribute),
                "{} lacks {attribute}",
                lib.display()
            );
        }
        assert!(
            text.starts_with("//!"),
            "{} has no crate docs",
            lib.display()
        );
    }
}

#[test]
fn crate_folders_match_package_names() {
    for entry in std::fs::read_dir(root().join("crates")).unwrap().flatten() {
        let manifest = std::fs::read_to_string(entry.path().join("Cargo.toml")).unwrap();
        let folder = entry.file_name().into_string().unwrap();
        assert!(
            manifest.contains(&format!("name = \"{folder}\"")),
            "crates/{folder}: package name differs from folder"
        );
        assert!(
            manifest.contains("[lints]\nworkspace = true"),
            "crates/{folder}: lints not from the workspace"
        );
    }
}

#[test]
fn no_stubs_or_ignored_tests() {
    let mut files = Vec::new();
    for dir in ["crates", "examples", "xtask"] {
        rust_files(&root().join(dir), &mut files);
    }
    let needles = [
        ["todo", "!("].concat(),
        ["unimplemented", "!("].concat(),
        ["#[", "ignore"].concat(),
    ];
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        for needle in &needles {
            assert!(
                !text.contains(needle.as_str()),
                "{} contains {needle}",
                file.display()
            );
        }
    }
}

#[test]
fn architecture_code_map_lists_every_crate() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let map = text
        .split("## Code map")
        .nth(1)
        .and_then(|rest| {
            rest.split("\n\n")
                .find(|block| block.trim_start().starts_with('|'))
        })
        .expect("ARCHITECTURE.md has a code map table");
    for entry in std::fs::read_dir(root().join("crates")).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        assert!(
            map.contains(&format!("| `crates/{name}` |")),
            "the code map table of ARCHITECTURE.md lacks crates/{name}"
        );
    }
    for line in map.lines() {
        assert!(
            line.starts_with('|'),
            "the code map is one table; found {line:?}"
        );
    }
}

#[test]
fn architecture_states_the_invariants() {
    let text = std::fs::read_to_string(root().join("ARCHITECTURE.md")).unwrap();
    let count = text.matches("**Architecture Invariant:**").count();
    assert!(
        count >= 10,
        "ARCHITECTURE.md states {count} invariants, expected at least 10"
    );
}

#[test]
fn every_environment_variable_is_documented() {
    let source = std::fs::read_to_string(root().join("crates/replaysafe-core/src/env.rs")).unwrap();
    let docs = std::fs::read_to_string(root().join("docs/reference/environment.md")).unwrap();
    let variables: Vec<&str> = source
        .lines()
        .filter_map(|line| line.trim().strip_prefix("pub const "))
        .filter_map(|rest| rest.split('"').nth(1))
        .collect();
    assert!(variables.len() >= 14, "found only {variables:?}");
    for variable in variables {
        assert!(
            docs.contains(&format!("`{variable}`")),
            "docs/reference/environment.md lacks {variable}"
        );
    }
}

#[test]
fn every_test_server_variable_is_documented() {
    let docs = std::fs::read_to_string(root().join("docs/reference/environment.md")).unwrap();
    let mut sources = Vec::new();
    rust_files(&root().join("xtask/src/services"), &mut sources);
    let mut found = 0;
    for source in sources {
        let text = std::fs::read_to_string(&source).unwrap();
        for (index, _) in text.match_indices("\"REPLAYSAFE_TEST_") {
            let name: String = text[index + 1..]
                .chars()
                .take_while(|c| c.is_ascii_uppercase() || *c == '_')
                .collect();
            found += 1;
            assert!(
                docs.contains(&format!("`{name}`")),
                "docs/reference/environment.md lacks {name}"
            );
        }
    }
    assert!(found >= 15, "found only {found} test-server variables");
}

#[test]
fn every_reason_is_documented() {
    let source =
        std::fs::read_to_string(root().join("crates/replaysafe-core/src/gate.rs")).unwrap();
    let docs = std::fs::read_to_string(root().join("docs/reference/journal.md")).unwrap();
    let reasons: Vec<&str> = source
        .lines()
        .filter_map(|line| line.trim().strip_prefix("Reason::"))
        .filter_map(|rest| rest.split("=> \"").nth(1))
        .filter_map(|rest| rest.split('"').next())
        .collect();
    assert!(reasons.len() >= 9, "found only {reasons:?}");
    for reason in reasons {
        assert!(
            docs.contains(&format!("`{reason}`")),
            "docs/reference/journal.md lacks reason {reason}"
        );
    }
}

#[test]
fn readme_starts_with_the_two_commands() {
    let text = std::fs::read_to_string(root().join("README.md")).unwrap();
    let demo = text
        .find("cargo xtask demo")
        .expect("README names cargo xtask demo");
    let ci = text
        .find("cargo xtask ci")
        .expect("README names cargo xtask ci");
    assert!(
        demo < 1500 && ci < 1500,
        "the two commands belong at the top of the README"
    );
    let ci_script = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(ci_script.contains("cargo xtask ci"));
}

#[test]
fn every_member_is_published_with_its_metadata_or_listed_as_unpublished() {
    let mut members: Vec<PathBuf> = std::fs::read_dir(root().join("crates"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    members.push(root().join("bindings/python"));
    members.push(root().join("examples"));
    members.push(root().join("xtask"));
    let mut unpublished = Vec::new();
    let mut published = Vec::new();
    for member in members {
        let manifest = std::fs::read_to_string(member.join("Cargo.toml")).unwrap();
        let name = manifest
            .lines()
            .find_map(|line| line.strip_prefix("name = \""))
            .and_then(|rest| rest.strip_suffix('"'))
            .unwrap()
            .to_owned();
        if manifest.contains("\npublish = false") {
            unpublished.push(name);
            continue;
        }
        for field in [
            "description",
            "license",
            "repository",
            "readme",
            "keywords",
            "categories",
        ] {
            assert!(
                manifest.lines().any(|line| line.starts_with(field)),
                "{name} is published but its manifest has no {field}"
            );
        }
        published.push(name);
    }
    unpublished.sort();
    let mut listed: Vec<String> = crate::ci::UNPUBLISHED
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    listed.sort();
    assert_eq!(unpublished, listed, "xtask's UNPUBLISHED list");
    published.sort();
    let mut checked: Vec<String> = crate::public_api::CRATES
        .iter()
        .map(|(name, _)| (*name).to_owned())
        .filter(|name| root().join("crates").join(name).exists())
        .collect();
    checked.sort();
    assert_eq!(
        published, checked,
        "every published crate's public API is checked"
    );
}
