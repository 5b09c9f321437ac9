//! The documents agree with the code and with one another: the figures
//! they share are the ones the defaults give, and every item of the crate
//! they name by path exists.

use std::time::Duration;

use reqwest_safe_retry::RetryConfig;

/// Every document a user reads, by name, its comment markers and line
/// breaks taken out.
fn documents() -> Vec<(&'static str, String)> {
    let raw = [
        ("README.md", include_str!("../../README.md")),
        ("MIGRATING.md", include_str!("../../MIGRATING.md")),
        ("BENCHMARKS.md", include_str!("../../BENCHMARKS.md")),
        ("CONTRIBUTING.md", include_str!("../../CONTRIBUTING.md")),
        ("CHANGELOG.md (unreleased)", unreleased(include_str!("../../CHANGELOG.md"))),
        ("src/lib.rs", include_str!("../../src/lib.rs")),
        ("src/budget/mod.rs", include_str!("../../src/budget/mod.rs")),
    ];
    raw.into_iter().map(|(name, text)| (name, flat(text))).collect()
}

/// The changelog's entries not yet released: older ones tell what was.
fn unreleased(changelog: &str) -> &str {
    let start = changelog.find("## [Unreleased]").expect("an unreleased section");
    let rest = &changelog[start..];
    let end = rest[3..].find("\n## [").map_or(rest.len(), |at| at + 3);
    &rest[..end]
}

/// `text` as one line of words, without Rust's comment markers.
fn flat(text: &str) -> String {
    let words = text.lines().map(|line| {
        let line = line.trim_start();
        line.strip_prefix("//!").or_else(|| line.strip_prefix("///")).unwrap_or(line)
    });
    words.flat_map(str::split_whitespace).collect::<Vec<_>>().join(" ")
}

/// The outage bound of the defaults, `1 + ratio × window / T + (reserve +
/// 1) / (r × T)` at most `1 + max_retries`, at `rate` requests a second
/// over `outage`.
fn bound(rate: f64, outage: Duration) -> f64 {
    let config = RetryConfig::default();
    let budget = config.budget().expect("a budget by default");
    let reserve = budget.reserve().unwrap_or(config.max_retries() + 2);
    let t = outage.as_secs_f64();
    let bound = 1.0
        + budget.ratio() * budget.window().as_secs_f64() / t
        + f64::from(reserve + 1) / (rate * t);
    bound.min(1.0 + f64::from(config.max_retries()))
}

/// [`bound`] at one request a second, to two decimals.
fn default_bound(outage: Duration) -> String {
    format!("{:.2}", bound(1.0, outage))
}

#[test]
fn the_readme_s_outage_table_holds_each_cell_to_the_bound_of_its_rate() {
    let readme = include_str!("../../README.md");
    let rates = [0.1, 1.0, 10.0, 1000.0];
    for (row, outage) in [("| 60 s: load", 60), ("| 10 minutes", 600)] {
        let line = readme.lines().find(|line| line.starts_with(row)).expect("the row");
        let cells: Vec<&str> = line.split('|').map(str::trim).filter(|c| !c.is_empty()).collect();
        assert_eq!(cells.len(), 1 + rates.len(), "{line}");
        for (cell, rate) in cells[1..].iter().zip(rates) {
            let (measured, stated) = cell.split_once(" ≤ ").expect("measured ≤ bound");
            let want = format!("{:.3}", bound(rate, Duration::from_secs(outage)));
            assert_eq!(stated, want, "{row} at {rate} req/s");
            let measured: f64 = measured.trim_matches('*').parse().unwrap();
            assert!(measured <= want.parse::<f64>().unwrap(), "{cell}");
        }
    }
}

/// Each figure that comes right before `after` in any document, with the
/// document's name.
fn figures_before(after: &str) -> Vec<(&'static str, String)> {
    let mut found = Vec::new();
    for (name, text) in documents() {
        for (at, _) in text.match_indices(after) {
            let figure = text[..at].split_whitespace().next_back().unwrap_or("");
            found.push((name, figure.trim_start_matches('(').to_owned()));
        }
    }
    found
}

#[test]
fn every_document_states_the_defaults_outage_bound_as_the_defaults_give_it() {
    let minute = default_bound(Duration::from_secs(60));
    let mut stated = figures_before("at one request a second over a minute");
    stated.extend(figures_before("at a request a second over a minute"));
    assert!(stated.len() >= 3, "the bound over a minute is stated in {stated:?}");
    for (document, figure) in stated {
        assert_eq!(figure, minute, "{document}: the outage bound over a minute");
    }
    // "…over a minute, 1.01 over ten minutes".
    let ten = default_bound(Duration::from_secs(600));
    let stated = figures_before("over ten minutes; it tends to 1");
    assert!(!stated.is_empty(), "the bound over ten minutes is stated");
    for (document, figure) in stated {
        assert_eq!(figure, ten, "{document}: the outage bound over ten minutes");
    }
}

/// The names of the crate's public types, from its source.
fn public_types(source: &str) -> Vec<String> {
    let mut types = Vec::new();
    for kind in ["pub struct ", "pub enum ", "pub trait "] {
        for (at, _) in source.match_indices(kind) {
            let rest = &source[at + kind.len()..];
            let name: String =
                rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            types.push(name);
        }
    }
    types
}

/// Whether `source` defines `name` as a method, a function or a public
/// field (lower case), or an enum variant or a constant (upper case).
fn defines(source: &str, name: &str) -> bool {
    if name.starts_with(|c: char| c.is_ascii_lowercase()) {
        let forms = [format!("fn {name}("), format!("fn {name}<"), format!("pub {name}:")];
        return forms.iter().any(|form| source.contains(form.as_str()));
    }
    source.lines().map(str::trim_start).any(|line| {
        let line = line.strip_prefix("pub const ").unwrap_or(line);
        line.strip_prefix(name).is_some_and(|rest| {
            rest.is_empty() || [",", "(", " {", ":"].iter().any(|end| rest.starts_with(end))
        })
    })
}

#[test]
fn every_item_the_documents_name_by_path_exists() {
    let source = crate::support::rust_sources("src");
    let types = public_types(&source);
    let mut checked = 0;
    // Not the changelog, which names what was removed.
    let documents = documents().into_iter().filter(|(name, _)| !name.starts_with("CHANGELOG"));
    for (document, text) in documents {
        for (at, _) in text.match_indices("::") {
            let before: String = text[..at]
                .chars()
                .rev()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            if !types.contains(&before) {
                continue;
            }
            let name: String = text[at + 2..]
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if name.is_empty() || types.contains(&name) {
                continue;
            }
            assert!(
                defines(&source, &name),
                "{document} names `{before}::{name}`, not in the crate"
            );
            checked += 1;
        }
    }
    assert!(checked > 50, "only {checked} paths checked");
}
