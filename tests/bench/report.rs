//! Collected figures and how they are shown: a text table on stdout and a JSON document.
//!
//! A `Figure` holds, per binary, one `Outcome` per run (a number in the figure's unit, or "n/a"
//! with the reason the run could not produce it). Summaries are min / median / max over the
//! runs that produced a number; the ratio is pi-rs median divided by reference median, so below
//! 1 means pi-rs is smaller or faster. The only judgement is each target's "met" / "MISSED"
//! (pi-rs's median against the limit the project set); nothing is asserted.

use serde_json::{Value, json};

#[derive(Clone, Debug)]
pub enum Outcome {
    Value(f64),
    NotAvailable(String),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Unit {
    Millis,
    Micros,
    Megabytes,
    Ratio,
    Count,
    /// 1 per run that passed a correctness check (shown as "ok n/n").
    Check,
}

impl Unit {
    fn label(self) -> &'static str {
        match self {
            Unit::Millis => "ms",
            Unit::Micros => "µs",
            Unit::Megabytes => "MB",
            Unit::Ratio => "×",
            Unit::Count => "",
            Unit::Check => "",
        }
    }

    fn json_name(self) -> &'static str {
        match self {
            Unit::Millis => "ms",
            Unit::Micros => "us",
            Unit::Megabytes => "MB",
            Unit::Ratio => "ratio",
            Unit::Count => "count",
            Unit::Check => "check",
        }
    }

    fn format(self, value: f64) -> String {
        match self {
            Unit::Count | Unit::Check => format!("{value:.0}"),
            _ if value.abs() >= 100.0 => format!("{value:.0}"),
            _ if value.abs() >= 10.0 => format!("{value:.1}"),
            _ => format!("{value:.2}"),
        }
    }
}

pub struct Figure {
    pub key: &'static str,
    pub title: &'static str,
    pub unit: Unit,
    pub pi_rs: Vec<Outcome>,
    /// One list per reference, in `PI_REFERENCE` order (empty when a scenario ran pi-rs alone).
    pub references: Vec<Vec<Outcome>>,
}

/// A target pi-rs works toward: its median must be at most `limit` (in the figure's unit).
pub struct Target {
    pub key: &'static str,
    pub limit: f64,
}

/// "met" / "missed" for pi-rs's median against the target for `figure`, if it has one.
fn verdict(figure: &Figure, targets: &[Target]) -> String {
    let Some(target) = targets.iter().find(|t| t.key == figure.key) else {
        return "-".into();
    };
    let limit = figure.unit.format(target.limit);
    match summarize(&figure.pi_rs) {
        Some(s) if s.median <= target.limit => format!("≤ {limit} met"),
        Some(_) => format!("≤ {limit} MISSED"),
        None => format!("≤ {limit} n/a"),
    }
}

pub struct Summary {
    pub min: f64,
    pub median: f64,
    pub max: f64,
    pub count: usize,
}

pub fn summarize(outcomes: &[Outcome]) -> Option<Summary> {
    let mut values: Vec<f64> = outcomes
        .iter()
        .filter_map(|o| match o {
            Outcome::Value(v) => Some(*v),
            Outcome::NotAvailable(_) => None,
        })
        .collect();
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let middle = values.len() / 2;
    let median = if values.len().is_multiple_of(2) {
        (values[middle - 1] + values[middle]) / 2.0
    } else {
        values[middle]
    };
    Some(Summary {
        min: values[0],
        median,
        max: values[values.len() - 1],
        count: values.len(),
    })
}

/// The first n/a reason, if any run has one.
fn first_reason(outcomes: &[Outcome]) -> Option<&str> {
    outcomes.iter().find_map(|o| match o {
        Outcome::NotAvailable(reason) => Some(reason.as_str()),
        Outcome::Value(_) => None,
    })
}

fn cell(unit: Unit, outcomes: &[Outcome], notes: &mut Vec<String>, label: &str) -> String {
    if outcomes.is_empty() {
        return "-".into();
    }
    let failed = outcomes.len() - summarize(outcomes).map_or(0, |s| s.count);
    let text = match summarize(outcomes) {
        None => "n/a".to_string(),
        Some(s) if unit == Unit::Check => format!("ok {}/{}", s.count, outcomes.len()),
        Some(s) if s.count == 1 => unit.format(s.median),
        Some(s) => format!(
            "{} / {} / {}",
            unit.format(s.min),
            unit.format(s.median),
            unit.format(s.max)
        ),
    };
    match first_reason(outcomes) {
        Some(reason) => {
            // Equal reasons share one note: a run that fails fails all of its figures.
            let note = format!("{label}: {reason}");
            let number = match notes.iter().position(|n| *n == note) {
                Some(index) => index + 1,
                None => {
                    notes.push(note);
                    notes.len()
                }
            };
            if failed == outcomes.len() {
                format!("n/a [{number}]")
            } else {
                format!("{text} ({failed} n/a [{number}])")
            }
        }
        None => text,
    }
}

fn ratio(figure: &Figure, reference: usize) -> Option<f64> {
    if figure.unit == Unit::Check {
        return None;
    }
    let ours = summarize(&figure.pi_rs)?.median;
    let theirs = summarize(figure.references.get(reference)?)?.median;
    (theirs != 0.0).then(|| ours / theirs)
}

/// The whole table against one reference (`None`: pi-rs alone), with each target's verdict and
/// the notes (n/a reasons) underneath.
pub fn table(figures: &[Figure], reference: Option<(usize, &str)>, targets: &[Target]) -> String {
    let mut notes = Vec::new();
    let label = reference.map_or("reference", |(_, name)| name);
    let mut rows = vec![[
        "figure".to_string(),
        "unit".to_string(),
        "pi-rs min / median / max".to_string(),
        format!("{label} min / median / max"),
        "ratio".to_string(),
        "pi-rs target".to_string(),
    ]];
    for figure in figures {
        let ours = cell(figure.unit, &figure.pi_rs, &mut notes, "pi-rs");
        let theirs = match reference.and_then(|(index, _)| figure.references.get(index)) {
            Some(outcomes) => cell(figure.unit, outcomes, &mut notes, label),
            None => "-".into(),
        };
        let ratio = reference
            .and_then(|(index, _)| ratio(figure, index))
            .map_or("-".to_string(), |r| format!("{r:.3}"));
        rows.push([
            figure.title.to_string(),
            figure.unit.label().to_string(),
            ours,
            theirs,
            ratio,
            verdict(figure, targets),
        ]);
    }
    let mut widths = [0usize; 6];
    for row in &rows {
        for (width, text) in widths.iter_mut().zip(row) {
            *width = (*width).max(text.chars().count());
        }
    }
    let mut out = String::new();
    for (index, row) in rows.iter().enumerate() {
        let mut line = String::new();
        for (column, (text, width)) in row.iter().zip(widths).enumerate() {
            let pad = width - text.chars().count();
            if column == 0 || column == 1 || column == 5 {
                line.push_str(text);
                line.push_str(&" ".repeat(pad));
            } else {
                line.push_str(&" ".repeat(pad));
                line.push_str(text);
            }
            line.push_str("  ");
        }
        out.push_str(line.trim_end());
        out.push('\n');
        if index == 0 {
            let total: usize = widths.iter().sum::<usize>() + 2 * (widths.len() - 1);
            out.push_str(&"-".repeat(total));
            out.push('\n');
        }
    }
    if !notes.is_empty() {
        out.push('\n');
        for (index, note) in notes.iter().enumerate() {
            out.push_str(&format!("[{}] {note}\n", index + 1));
        }
    }
    out
}

fn outcomes_json(outcomes: &[Outcome]) -> Value {
    let runs: Vec<Value> = outcomes
        .iter()
        .map(|o| match o {
            Outcome::Value(v) => json!(v),
            Outcome::NotAvailable(reason) => json!({ "na": reason }),
        })
        .collect();
    match summarize(outcomes) {
        Some(s) => json!({"runs": runs, "min": s.min, "median": s.median, "max": s.max}),
        None => json!({"runs": runs, "min": null, "median": null, "max": null}),
    }
}

pub fn to_json(figures: &[Figure], header: Value, targets: &[Target]) -> Value {
    let figures: Vec<Value> = figures
        .iter()
        .map(|figure| {
            json!({
                "key": figure.key,
                "title": figure.title,
                "unit": figure.unit.json_name(),
                "pi_rs": outcomes_json(&figure.pi_rs),
                "references": figure.references.iter().map(|r| outcomes_json(r)).collect::<Vec<_>>(),
                "median_ratios": (0..figure.references.len()).map(|i| ratio(figure, i)).collect::<Vec<_>>(),
                "target": verdict(figure, targets),
            })
        })
        .collect();
    json!({"meta": header, "figures": figures})
}
