//! `explain`: the logical plan, what each optimizer stage did, the optimized plan and the
//! physical operators — as stable text for people, JSON for tools, or Graphviz DOT.
//!
//! The text and JSON forms never contain timings or addresses, so they can be pinned by
//! snapshot tests; [`flumen_optimizer::Report`] has the timings.

use flumen_optimizer::{Report, StageReport};
use serde_json::json;

/// The output form of `explain`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ExplainFormat {
    /// Indented text, one node per line.
    #[default]
    Text,
    /// A JSON document with the same content.
    Json,
    /// The optimized plan as a Graphviz DOT graph.
    Dot,
}

fn fired(stage: &StageReport) -> String {
    if stage.rules_fired.is_empty() {
        "no rule fired".to_string()
    } else {
        stage.rules_fired.iter().map(|(r, n)| format!("{r} x{n}")).collect::<Vec<_>>().join(", ")
    }
}

fn summary(stage: &StageReport) -> String {
    format!(
        "stage {}: {}; {} iteration{}, e-graph {} nodes in {} classes ({}); plan {}",
        stage.name,
        fired(stage),
        stage.iterations,
        if stage.iterations == 1 { "" } else { "s" },
        stage.egraph_nodes,
        stage.egraph_classes,
        stage.stop_reason,
        if stage.changed { "changed" } else { "unchanged" }
    )
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

/// Renders `report` in `format`; `verbose` adds the plan after each stage ("unchanged"
/// when the stage changed nothing). The physical plan fuses stages when `fuse`.
pub fn render(report: &Report, format: ExplainFormat, verbose: bool, fuse: bool) -> String {
    let physical = flumen_runtime::physical::describe(&report.output, fuse);
    match format {
        ExplainFormat::Text => {
            let mut out = format!("== Logical plan ==\n{}", report.input);
            out.push_str("== Optimizer ==\n");
            if report.stages.is_empty() {
                out.push_str("optimization is off\n");
            }
            for stage in &report.stages {
                out.push_str(&summary(stage));
                out.push('\n');
                if verbose {
                    if stage.changed {
                        out.push_str(&indent(&stage.plan.to_string()));
                    } else {
                        out.push_str("  unchanged\n");
                    }
                }
            }
            out.push_str(&format!("== Optimized plan ==\n{}", report.output));
            out.push_str(&format!("== Physical plan ==\n{physical}"));
            out
        }
        ExplainFormat::Json => {
            let lines = |s: String| s.lines().map(str::to_string).collect::<Vec<_>>();
            let stages: Vec<_> = report
                .stages
                .iter()
                .map(|s| {
                    let mut stage = json!({
                        "name": s.name,
                        "rules_fired": s.rules_fired,
                        "iterations": s.iterations,
                        "egraph_nodes": s.egraph_nodes,
                        "egraph_classes": s.egraph_classes,
                        "stop_reason": s.stop_reason,
                        "changed": s.changed,
                    });
                    if verbose {
                        stage["plan"] = json!(lines(s.plan.to_string()));
                    }
                    stage
                })
                .collect();
            let doc = json!({
                "logical_plan": lines(report.input.to_string()),
                "stages": stages,
                "optimized_plan": lines(report.output.to_string()),
                "physical_plan": lines(physical),
            });
            serde_json::to_string_pretty(&doc).expect("JSON values serialize") + "\n"
        }
        ExplainFormat::Dot => report.output.to_dot(),
    }
}
