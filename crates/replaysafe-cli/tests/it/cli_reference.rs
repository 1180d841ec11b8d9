//! `docs/reference/cli.md` is the help of every subcommand, generated from the binary:
//! it cannot drift. Run with `REPLAYSAFE_BLESS=1` to write it again after changing a flag.

use crate::send::clean_command;

const PAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/reference/cli.md");

/// The help of `replaysafe PATH…`.
fn help(path: &[String]) -> String {
    let output = clean_command()
        .args(path)
        .arg("--help")
        .env("COLUMNS", "100")
        .output()
        .unwrap();
    assert!(output.status.success(), "{path:?}");
    String::from_utf8(output.stdout).unwrap()
}

/// The subcommands a help text lists (without `help`).
fn subcommands(help: &str) -> Vec<String> {
    let Some((_, commands)) = help.split_once("\nCommands:\n") else {
        return Vec::new();
    };
    commands
        .lines()
        .take_while(|line| line.starts_with("  "))
        .filter_map(|line| line.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

fn generate() -> String {
    let mut page = String::from(
        "# Command-line reference\n\n\
         Every `replaysafe` subcommand's `--help`, generated from the binary by \
         `crates/replaysafe-cli/tests/it/cli_reference.rs` (run it with `REPLAYSAFE_BLESS=1` \
         to write this page again; CI fails when it differs from the binary).\n\
         The guides say when to use which: [authors](../guides/authors.md), \
         [reviewers](../guides/reviewers.md), [operators](../guides/operators.md); \
         client flags map onto [client configurations](clients.md).\n",
    );
    let mut queue: Vec<Vec<String>> = vec![Vec::new()];
    while let Some(path) = queue.pop() {
        let text = help(&path);
        let title = std::iter::once("replaysafe")
            .chain(path.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        page.push_str(&format!(
            "\n## `{title}`\n\n```text\n{}\n```\n",
            text.trim_end()
        ));
        for sub in subcommands(&text).into_iter().rev() {
            let mut next = path.clone();
            next.push(sub);
            queue.push(next);
        }
    }
    page
}

#[test]
fn the_cli_reference_is_the_binarys_help() {
    let generated = generate();
    if std::env::var_os("REPLAYSAFE_BLESS").is_some() {
        std::fs::write(PAGE, &generated).unwrap();
    }
    let written = std::fs::read_to_string(PAGE).unwrap_or_default();
    assert!(
        written == generated,
        "docs/reference/cli.md differs from the binary's help: run \
         REPLAYSAFE_BLESS=1 cargo test -p replaysafe-cli --test it cli_reference"
    );
    for command in ["send webhook", "outbox work", "approve keygen", "report"] {
        assert!(
            generated.contains(&format!("## `replaysafe {command}`")),
            "{command}"
        );
    }
}
