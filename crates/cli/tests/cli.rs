//! The `flumen` binary end to end.

use std::process::Command;

mod common;
use common::{checksum, snapshot_metadata};

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
    assert!(dot.contains("filter(pfor (label != 9); parallel autotune)"), "{dot}");

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

/// The printed elements of a `run --show` (everything but the summary line).
fn printed_elements(stdout: &str) -> Vec<String> {
    let body = &stdout[..stdout.trim_end().rfind('\n').map_or(0, |i| i + 1)];
    body.split("element ").filter(|s| !s.is_empty()).map(str::to_string).collect()
}

#[test]
fn a_run_continues_in_another_process_from_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let pipeline = "examples/pipelines/figure4_csv.json";
    let (ok, whole, stderr) = flumen(&["run", pipeline, "--show", "1000"]);
    assert!(ok, "{stderr}");
    let whole = printed_elements(&whole);
    assert!(whole.len() > 8, "{}", whole.len());
    for mode in ["symbolic", "full"] {
        let checkpoint = dir.path().join(format!("{mode}.ckpt"));
        let checkpoint = checkpoint.to_str().unwrap();
        let (ok, first, stderr) = flumen(&[
            "run",
            pipeline,
            "--show",
            "1000",
            "--limit",
            "5",
            "--save-every",
            "2",
            "--checkpoint",
            checkpoint,
            "--checkpoint-mode",
            mode,
        ]);
        assert!(ok, "{stderr}");
        assert_eq!(stderr.matches("checkpoint after").count(), 2, "{stderr}");
        // The last checkpoint was taken after element 4; element 5 was printed after it.
        let first = printed_elements(&first);
        assert_eq!(first.len(), 5);
        let (ok, rest, stderr) = flumen(&["run", pipeline, "--show", "1000", "--restore", checkpoint]);
        assert!(ok, "{stderr}");
        assert!(stderr.contains("at element 4"), "{stderr}");
        let rest = printed_elements(&rest);
        assert_eq!([&first[..4], &rest[..]].concat(), whole, "{mode}");
    }
    // A checkpoint of another pipeline is refused.
    let checkpoint = dir.path().join("symbolic.ckpt");
    let (ok, _, stderr) =
        flumen(&["run", "examples/pipelines/map_chain.json", "--restore", checkpoint.to_str().unwrap()]);
    assert!(!ok && stderr.contains("another dataset"), "{stderr}");
}

/// A pipeline of `rows` elements through a snapshot in `dir`, written as JSON to `file`.
fn snapshot_pipeline(dir: &std::path::Path, file: &std::path::Path, rows: i64, expiry: std::time::Duration) {
    use flumen::prelude::*;
    let ds = Dataset::range(0, rows)
        .unwrap()
        .map(MapFunction::with_fields([("y", sqrt(cast(col("value"), arrow::datatypes::DataType::Float64)))]))
        .unwrap()
        .snapshot(dir.to_str().unwrap(), SnapshotOptions::default().with_pending_expiry(expiry))
        .unwrap()
        .batch(1000)
        .unwrap();
    std::fs::write(file, ds.serialize().unwrap()).unwrap();
}

#[test]
fn a_killed_writer_leaves_a_snapshot_that_is_never_read() {
    let tmp = tempfile::tempdir().unwrap();
    let snapshots = tmp.path().join("snapshots");
    let pipeline = tmp.path().join("p.json");
    let rows = 5_000_000;
    snapshot_pipeline(&snapshots, &pipeline, rows, std::time::Duration::from_secs(24 * 3600));
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let mut child = Command::new(env!("CARGO_BIN_EXE_flumen"))
        .args(["run", pipeline.to_str().unwrap()])
        .current_dir(root)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Wait (bounded) until the writer has published its pending metadata and written a shard
    // chunk, then kill -9 it mid-write.
    let started = std::time::Instant::now();
    loop {
        let writing = snapshot_metadata(&snapshots).len() == 1
            && std::fs::read_dir(&snapshots).unwrap().flatten().any(|fp| {
                std::fs::read_dir(fp.path()).into_iter().flatten().flatten().any(|run| {
                    run.path().is_dir()
                        && std::fs::read_dir(run.path()).unwrap().flatten().any(|s| s.metadata().unwrap().len() > 4096)
                })
            });
        if writing {
            break;
        }
        assert!(child.try_wait().unwrap().is_none(), "the writer ended before it could be killed");
        assert!(started.elapsed() < std::time::Duration::from_secs(120), "the writer never started writing");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let meta = snapshot_metadata(&snapshots);
    assert_eq!(meta[0]["finalized"], false, "{meta:?}");

    // A new run of a smaller prefix must not read the partial snapshot: it passes through
    // (the pending snapshot is fresh), computes every element, and finalizes nothing.
    let (ok, out, stderr) = flumen(&["run", pipeline.to_str().unwrap(), "--limit", "3"]);
    assert!(ok, "{stderr}");
    assert!(out.starts_with("3 batches, 3000 rows"), "{out}");
    assert_eq!(snapshot_metadata(&snapshots)[0]["finalized"], false);

    // Once the pending snapshot counts as expired (the same upstream plan, so the same
    // snapshot, with expiry 0), a run takes it over, writes every row and finalizes.
    let killed_run = meta[0]["run_id"].clone();
    let expired = tmp.path().join("expired.json");
    snapshot_pipeline(&snapshots, &expired, rows, std::time::Duration::ZERO);
    let (ok, out, stderr) = flumen(&["run", expired.to_str().unwrap()]);
    assert!(ok && out.starts_with("5000 batches, 5000000 rows"), "{out}{stderr}");
    let meta = snapshot_metadata(&snapshots);
    assert_eq!(meta.len(), 1);
    assert_eq!(meta[0]["finalized"], true);
    assert_eq!(meta[0]["rows"], rows);
    assert_ne!(meta[0]["run_id"], killed_run);
}

#[test]
fn two_processes_race_to_write_one_snapshot() {
    let tmp = tempfile::tempdir().unwrap();
    let snapshots = tmp.path().join("snapshots");
    let pipeline = tmp.path().join("p.json");
    snapshot_pipeline(&snapshots, &pipeline, 2_000_000, std::time::Duration::from_secs(3600));
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let spawn = || {
        Command::new(env!("CARGO_BIN_EXE_flumen"))
            .args(["run", pipeline.to_str().unwrap()])
            .current_dir(root)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (a, b) = (spawn(), spawn());
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    for out in [&a, &b] {
        assert!(out.status.success());
        assert!(String::from_utf8_lossy(&out.stdout).starts_with("2000 batches, 2000000 rows"));
    }
    // Exactly one snapshot, finalized by one run, holding every row.
    let meta = snapshot_metadata(&snapshots);
    assert_eq!(meta.len(), 1);
    assert_eq!((meta[0]["finalized"].clone(), meta[0]["rows"].clone()), (true.into(), 2_000_000.into()));
    let runs: Vec<_> = std::fs::read_dir(snapshots.read_dir().unwrap().next().unwrap().unwrap().path())
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_dir())
        .collect();
    assert_eq!(runs.len(), 1, "the loser's files are gone");
    // And a third run reads it.
    let (ok, out, _) = flumen(&["run", pipeline.to_str().unwrap()]);
    assert!(ok && out.starts_with("2000 batches, 2000000 rows"), "{out}");
}

fn bench_line(workload: &str, data: &std::path::Path) -> serde_json::Value {
    let (ok, stdout, stderr) = flumen(&["bench", workload, "--data", data.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    let line: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
    for key in ["engine", "workload", "variant", "rows", "batches", "seconds", "rows_per_s", "checksum", "peak_rss_mb"]
    {
        assert!(line.get(key).is_some(), "{key} missing: {line}");
    }
    assert_eq!(line["workload"], workload);
    line
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-6 * b.abs().max(1.0)
}

#[test]
fn bench_w4_prints_the_workloads_json_line() {
    let line = bench_line("w4", std::path::Path::new("."));
    // The same pipeline as a scalar loop.
    let (mut rows, mut sum) = (0u64, 0.0f64);
    for x in 0..2_000_000i64 {
        let v = ((3 * x + 1) as f64).sqrt() * 0.5;
        if v.floor() % 3.0 != 0.0 {
            rows += 1;
            sum += v * v + 1.0;
        }
    }
    assert_eq!(line["rows"], rows);
    assert_eq!(line["batches"], rows.div_ceil(4096));
    assert!(close(line["checksum"].as_f64().unwrap(), sum), "{line} vs {sum}");
}

#[test]
fn bench_w1_and_w2_read_the_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    // w1: 2 CSV files of 700 rows; f_j = (r * (j + 3) mod 97) / 97, label = r mod 10.
    std::fs::create_dir(dir.path().join("csv_tabular")).unwrap();
    let (mut w1_rows, mut w1_sum) = (0u64, 0.0f64);
    for file in 0..2 {
        let mut text = (0..16).map(|j| format!("f{j},")).collect::<String>() + "label\n";
        for r in (file * 700)..(file * 700 + 700) {
            let f: Vec<f64> = (0..16).map(|j| ((r * (j + 3)) % 97) as f64 / 97.0).collect();
            let label = r % 10;
            text += &f.iter().map(|v| format!("{v},")).collect::<String>();
            text += &format!("{label}\n");
            if f[0] > -1.5 && label != 9 {
                w1_rows += 1;
                w1_sum += f[0] * f[1];
            }
        }
        std::fs::write(dir.path().join(format!("csv_tabular/part-{file:05}.csv")), text).unwrap();
    }
    let line = bench_line("w1", dir.path());
    assert_eq!(line["rows"], w1_rows);
    assert!(close(line["checksum"].as_f64().unwrap(), w1_sum), "{line} vs {w1_sum}");

    // w2: 600 Examples; features[j] = (i + j) / 64, label = i mod 10, weight = 0.5 + (i mod 3).
    std::fs::create_dir(dir.path().join("tfrecord_example")).unwrap();
    let path = dir.path().join("tfrecord_example/part-00000.tfrecord");
    let mut writer = flumen::TfRecordWriter::create(path.to_str().unwrap(), flumen::RecordCompression::None).unwrap();
    let mut kept = vec![];
    for i in 0..600u32 {
        let features: Vec<f32> = (0..64).map(|j| (i + j) as f32 / 64.0).collect();
        let (label, weight) = (i64::from(i % 10), 0.5 + (i % 3) as f32);
        writer.write(&example(&features, label, weight)).unwrap();
        if label < 8 {
            kept.push(f64::from(features[0] * weight));
        }
    }
    writer.finish().unwrap();
    let full = kept.len() / 256 * 256; // batch(256, drop_remainder)
    let line = bench_line("w2", dir.path());
    assert_eq!(line["rows"], full as u64);
    let sum: f64 = kept[..full].iter().sum();
    assert!(close(line["checksum"].as_f64().unwrap(), sum), "{line} vs {sum}");
}

#[test]
fn bench_w6_buckets_the_parsed_token_lists() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("tfrecord_text")).unwrap();
    let mut non_zero = 0u64;
    for file in 0..2usize {
        let path = dir.path().join(format!("tfrecord_text/part-{file:05}.tfrecord"));
        let mut writer =
            flumen::TfRecordWriter::create(path.to_str().unwrap(), flumen::RecordCompression::None).unwrap();
        for i in 0..150usize {
            // 3 to 150 tokens, each 0 to 9 (some zero), label i mod 2.
            let tokens: Vec<u8> = (0..3 + (i * 37 + file) % 148).map(|t| ((i + t) % 10) as u8).collect();
            if tokens.len() >= 8 {
                non_zero += tokens.iter().filter(|t| **t != 0).count() as u64;
            }
            writer.write(&text_example(&tokens, (i % 2) as u8)).unwrap();
        }
        writer.finish().unwrap();
    }
    let line = bench_line("w6", dir.path());
    assert_eq!(line["checksum"].as_f64().unwrap(), non_zero as f64, "{line}");
}

/// A serialized `tf.train.Example` with `tokens` and `label`.
fn text_example(tokens: &[u8], label: u8) -> Vec<u8> {
    let tokens: Vec<i64> = tokens.iter().map(|t| i64::from(*t)).collect();
    let label = [i64::from(label)];
    flumen::serialize_example(&[
        ("tokens", flumen::FeatureValues::Int64(&tokens)),
        ("label", flumen::FeatureValues::Int64(&label)),
    ])
}

/// A serialized `tf.train.Example` with `features`, `label`, `id` (0) and `weight`.
fn example(features: &[f32], label: i64, weight: f32) -> Vec<u8> {
    flumen::serialize_example(&[
        ("features", flumen::FeatureValues::Float32(features)),
        ("label", flumen::FeatureValues::Int64(&[label])),
        ("id", flumen::FeatureValues::Int64(&[0])),
        ("weight", flumen::FeatureValues::Float32(&[weight])),
    ])
}

#[test]
fn gen_data_writes_what_flumen_and_the_hand_written_limits_agree_on() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, _, stderr) = flumen(&["gen-data", dir.path().to_str().unwrap(), "--scale", "small"]);
    assert!(ok, "{stderr}");
    for (sub, files) in [("csv_tabular", 4), ("tfrecord_example", 8), ("tfrecord_text", 4)] {
        assert_eq!(std::fs::read_dir(dir.path().join(sub)).unwrap().count(), files, "{sub}");
    }
    for workload in ["w1", "w2", "w4", "w6"] {
        let engine = bench_line(workload, dir.path());
        let (ok, stdout, stderr) = flumen(&["bench", workload, "--data", dir.path().to_str().unwrap(), "--limit"]);
        assert!(ok, "{stderr}");
        let limit: serde_json::Value = serde_json::from_str(stdout.trim()).expect("one JSON line");
        assert_eq!(limit["engine"], "hand-written");
        assert_eq!(limit["rows"], engine["rows"], "{workload}: {limit} vs {engine}");
        assert!(engine["rows"].as_u64().unwrap() > 0, "{engine}");
        let (a, b) = (limit["checksum"].as_f64().unwrap(), engine["checksum"].as_f64().unwrap());
        assert!(close(a, b), "{workload}: {limit} vs {engine}");
    }
    // Alternating rounds end with a summary of both.
    let (ok, stdout, stderr) = flumen(&["bench", "w6", "--data", dir.path().to_str().unwrap(), "--rounds", "2"]);
    assert!(ok, "{stderr}");
    let lines: Vec<&str> = stdout.trim().lines().collect();
    assert_eq!(lines.len(), 5, "{stdout}");
    let summary: serde_json::Value = serde_json::from_str(lines[4]).unwrap();
    assert_eq!(summary["checksums_agree"], true, "{summary}");
    assert!(summary["fraction_of_limit"].as_f64().unwrap() > 0.0, "{summary}");
}

#[test]
fn run_writes_every_element_and_a_checksum_that_only_the_values_decide() {
    let dir = tempfile::tempdir().unwrap();
    let path = |name: &str| dir.path().join(name).to_str().unwrap().to_string();
    let pipeline = "examples/pipelines/figure4_csv.json";
    let (ok, stdout, stderr) = flumen(&["run", pipeline, "--checksum", "--output", &path("out.jsonl")]);
    assert!(ok, "{stderr}");
    let sum = checksum(&stdout);
    // 17 batches of up to 32 rows: one JSON object per batch, each field an array of rows.
    let text = std::fs::read_to_string(path("out.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 17);
    let rows: usize = lines.iter().map(|l| l["label"].as_array().unwrap().len()).sum();
    assert_eq!(rows, 543);
    assert!(lines.iter().all(|l| l["x"].as_array().unwrap().len() == l["label"].as_array().unwrap().len()));
    // The same values however they are computed: one thread, small chunks, no optimizer.
    for options in [&["--no-optimize"][..], &["--threads", "1", "--chunk-rows", "7"], &["--rule", "map-fusion=off"]] {
        let (ok, stdout, stderr) = flumen(&[&["run", pipeline, "--checksum"][..], options].concat());
        assert!(ok, "{stderr}");
        assert_eq!(checksum(&stdout), sum, "{options:?}");
    }
    let (_, other, _) = flumen(&["run", "examples/pipelines/map_chain.json", "--checksum"]);
    assert_ne!(checksum(&other), sum);

    // An IPC stream keeps one record batch per element; Parquet holds the rows.
    let (ok, _, stderr) = flumen(&["run", pipeline, "--output", &path("out.arrows")]);
    assert!(ok, "{stderr}");
    let reader =
        arrow::ipc::reader::StreamReader::try_new(std::fs::File::open(path("out.arrows")).unwrap(), None).unwrap();
    let batches: Vec<_> = reader.map(|b| b.unwrap()).collect();
    assert_eq!((batches.len(), batches.iter().map(|b| b.num_rows()).sum::<usize>()), (17, 543));
    let (ok, _, stderr) = flumen(&["run", pipeline, "--output", &path("out.parquet")]);
    assert!(ok, "{stderr}");
    let file = std::fs::File::open(path("out.parquet")).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(file).unwrap().build().unwrap();
    assert_eq!(reader.map(|b| b.unwrap().num_rows()).sum::<usize>(), 543);
}

#[test]
fn bad_option_values_are_errors_naming_them() {
    let pipeline = "examples/pipelines/figure4_csv.json";
    for (args, says) in [
        (&["--rule", "no-such-rule=off"][..], "no rule named no-such-rule"),
        (&["--rule", "map-fusion"], "expected NAME=on or NAME=off"),
        (&["--ram-budget", "12X"], "not a unit of bytes"),
        (&["--output", "out.unknown"], "cannot tell the output form"),
    ] {
        let (ok, _, stderr) = flumen(&[&["run", pipeline][..], args].concat());
        assert!(!ok && stderr.contains(says), "{args:?}: {stderr}");
    }
}

#[test]
fn a_failed_run_publishes_no_output() {
    // range(0, 3).map(q := 10 / (value - 1)): element 1 divides by zero.
    let dir = tempfile::tempdir().unwrap();
    let pipeline = dir.path().join("fails.json");
    std::fs::write(
        &pipeline,
        r#"{"flumen_plan": 1, "nodes": [{"id": 0, "op": "source", "source": "range", "start": 0, "stop": 3, "step": 1},
        {"id": 1, "op": "map", "func": {"kind": "exprs", "outputs": [{"name": "q", "expr": {"binary": {"op": "div",
        "left": {"literal": {"int": [10, "int64"]}}, "right": {"binary": {"op": "sub", "left": {"column": "value"},
        "right": {"literal": {"int": [1, "int64"]}}}}}}}], "keep_input": true}, "inputs": [0]}], "output": 1}"#,
    )
    .unwrap();
    for name in ["new.parquet", "new.arrows", "new.jsonl", "old.jsonl"] {
        let out = dir.path().join(name);
        if name.starts_with("old") {
            std::fs::write(&out, "what was there before\n").unwrap();
        }
        let (ok, _, stderr) = flumen(&["run", pipeline.to_str().unwrap(), "--output", out.to_str().unwrap()]);
        assert!(!ok && stderr.contains("was not written"), "{name}: {stderr}");
        match name.starts_with("old") {
            true => assert_eq!(std::fs::read_to_string(&out).unwrap(), "what was there before\n"),
            false => assert!(!out.exists(), "{name} was left behind"),
        }
    }
    // Nothing else either: no temporary file is left beside the outputs.
    let mut left: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
    left.sort();
    assert_eq!(left, ["fails.json", "old.jsonl"]);
}
