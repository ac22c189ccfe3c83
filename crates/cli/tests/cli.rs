//! The `flumen` binary end to end.

use std::process::Command;

fn flumen(args: &[&str]) -> (bool, String, String) {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let out = Command::new(env!("CARGO_BIN_EXE_flumen")).args(args).current_dir(root).output().expect("runs");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[test]
fn run_reports_batches_rows_and_throughput() {
    let (ok, stdout, stderr) = flumen(&["run", "examples/pipelines/map_chain.json"]);
    assert!(ok, "{stderr}");
    let last = stdout.lines().last().unwrap();
    // 100k range elements, the filter keeps 66521 (tests/examples.rs checks the count
    // against a scalar loop); batches of 4096.
    assert!(last.starts_with("17 batches, 66521 rows in "), "{last}");
    assert!(last.ends_with("rows/s)"), "{last}");
}

#[test]
fn explain_prints_the_typed_plan_in_three_formats() {
    let (ok, text, stderr) = flumen(&["explain", "examples/pipelines/figure4_csv.json"]);
    assert!(ok, "{stderr}");
    let sections: Vec<&str> = text.lines().filter(|l| l.starts_with("== ")).collect();
    assert_eq!(sections, ["== Logical plan ==", "== Optimizer ==", "== Optimized plan ==", "== Physical plan =="]);
    assert!(text.contains("batch(32) -> {x: float64[?], cross: float64[?], label: int64[?]}"), "{text}");
    // One line per stage, and no per-stage plans without --verbose.
    let stages: Vec<&str> = text.lines().filter(|l| l.starts_with("stage ")).collect();
    assert_eq!(stages.len(), 5, "{text}");
    assert!(stages[1].starts_with("stage fusion: map-filter-fusion x1;"), "{text}");
    assert!(!text.contains("  unchanged"), "{text}");
    assert!(text.contains("BatchOp(32)"), "the physical plan: {text}");

    // DOT: the optimized plan (the filter now runs before the map).
    let (ok, dot, _) = flumen(&["explain", "--format", "dot", "examples/pipelines/figure4_csv.json"]);
    assert!(ok && dot.starts_with("digraph plan {"), "{dot}");
    assert_eq!(dot.matches(" -> n").count(), 6, "7 nodes in a chain: {dot}");
    assert!(dot.contains("filter(pfor (label != 9))"), "{dot}");

    // JSON: a document with the same four parts.
    let (ok, json, _) = flumen(&["explain", "--format", "json", "examples/pipelines/figure4_csv.json"]);
    assert!(ok);
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    let lines = |key: &str| doc[key].as_array().unwrap_or_else(|| panic!("{key} is a list of lines: {json}")).len();
    assert_eq!(lines("logical_plan"), 7);
    assert_eq!(lines("optimized_plan"), 7);
    assert_eq!(lines("physical_plan"), 7);
    let stages = doc["stages"].as_array().unwrap();
    let names: Vec<&str> = stages.iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["eliminate", "fusion", "pushdown", "vectorize", "parallelize"]);
    assert_eq!(stages[1]["rules_fired"]["map-filter-fusion"], 1);
    assert_eq!(stages[1]["changed"], true);
    assert_eq!(stages[0]["changed"], false);
    assert!(stages.iter().all(|s| s.get("plan").is_none()), "plans per stage only with --verbose");
}

#[test]
fn explain_verbose_shows_the_plan_after_each_stage() {
    let (ok, text, stderr) = flumen(&["explain", "--verbose", "examples/pipelines/figure4_csv.json"]);
    assert!(ok, "{stderr}");
    // Each stage line is followed by the plan it produced, or "unchanged".
    let lines: Vec<&str> = text.lines().collect();
    let after = |stage: &str| {
        let i = lines.iter().position(|l| l.starts_with(&format!("stage {stage}:"))).expect(stage);
        lines[i + 1]
    };
    assert_eq!(after("eliminate"), "  unchanged");
    assert_eq!(after("pushdown"), "  unchanged");
    assert!(after("fusion").starts_with("  #0 prefetch(autotune)"), "{text}");
    assert!(
        text.contains("\n          #4 filter((label != 9)) -> {f0: float64[], f1: float64[], label: int64[]}\n"),
        "{text}"
    );
    assert!(after("parallelize").starts_with("  #0 prefetch(autotune)"), "{text}");
    // The last stage's plan is the optimized plan, indented.
    let optimized = text.split("== Optimized plan ==\n").nth(1).unwrap().split("== Physical plan ==").next().unwrap();
    let indented: String = optimized.lines().map(|l| format!("  {l}\n")).collect();
    assert!(text.contains(&format!("; plan changed\n{indented}== Optimized plan ==")), "{text}");
    let (_, plain, _) = flumen(&["explain", "examples/pipelines/figure4_csv.json"]);
    assert!(text.len() > plain.len());

    // --verbose with JSON: each stage carries its plan as lines.
    let (ok, json, _) = flumen(&["explain", "--verbose", "--format", "json", "examples/pipelines/figure4_csv.json"]);
    assert!(ok);
    let doc: serde_json::Value = serde_json::from_str(&json).unwrap();
    for stage in doc["stages"].as_array().unwrap() {
        let plan = stage["plan"].as_array().unwrap_or_else(|| panic!("a plan per stage: {stage}"));
        assert_eq!(plan.len(), 7, "{stage}");
    }
    let last = doc["stages"].as_array().unwrap().last().unwrap();
    assert_eq!(last["plan"], doc["optimized_plan"]);
}

#[test]
fn errors_are_reported_not_panicked() {
    let (ok, _, stderr) = flumen(&["run", "no/such/pipeline.json"]);
    assert!(!ok && stderr.contains("no/such/pipeline.json"), "{stderr}");
    let dir = std::env::temp_dir().join(format!("flumen-cli-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.json");
    std::fs::write(&bad, r#"{"flumen_plan": 1, "nodes": [{"id": 0, "op": "source", "source": "range", "start": 0, "stop": 3, "step": 1}, {"id": 1, "op": "batch", "batch_size": 0, "drop_remainder": false, "inputs": [0]}], "output": 1}"#).unwrap();
    let (ok, _, stderr) = flumen(&["run", bad.to_str().unwrap()]);
    assert!(!ok && stderr.contains("batch_size must be > 0"), "{stderr}");
    std::fs::remove_dir_all(&dir).unwrap();
}
