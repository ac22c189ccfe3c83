//! File-system faults under `flumen run`: a read that fails midway (EIO), a full disk
//! (ENOSPC) while a cache file, a snapshot or a checkpoint is written, permission denied, a
//! file cut or deleted while it is read, and kill -9 at random moments of those writes.
//!
//! The faults are injected beneath the process's file layer by `faults/inject.c`, built here
//! with the system C compiler and loaded with `LD_PRELOAD`, so the binary under test is the
//! one users run. What must hold: an error naming the file (exit status 1, never a panic or
//! a signal), every element before the fault delivered, nothing partial ever published or
//! read back, and the next run completing with the right output.
//!
//! The kill -9 trials run a few times here; their long tier is
//! `FLUMEN_KILL_TRIALS=100 cargo test --release -p flumen-cli --test faults killed`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, Float64Array, Int64Array, RecordBatch, StringArray};
use flumen::prelude::*;
use flumen::{Dataset, RecordCompression, TfRecordWriter};

mod common;
use common::snapshot_metadata;

/// The fault injector, built once per test process.
fn injector() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let lib = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("inject-{}.so", std::process::id()));
        let source = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/faults/inject.c");
        let out = Command::new("cc")
            .args(["-shared", "-fPIC", "-O1", "-o"])
            .arg(&lib)
            .arg(source)
            .arg("-ldl")
            .output()
            .expect("a C compiler (cc) to build the fault injector");
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        lib
    })
}

/// A fault: `kind` (eio-read, enospc-write, eacces-open) for files whose path contains
/// `path`, after `after` bytes have been read or written.
#[derive(Clone, Copy)]
struct Fault<'a> {
    kind: &'a str,
    path: &'a str,
    after: u64,
}

/// What a `flumen` run did.
struct Run {
    status: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Run {
    fn ok(&self) -> bool {
        self.status == Some(0)
    }

    /// Asserts the run ended with an error (not a panic, not a signal) saying each of `says`.
    fn assert_error(&self, says: &[&str]) {
        assert_eq!(self.status, Some(1), "an error, not a panic or a signal: {}", self.stderr);
        assert!(!self.stderr.contains("panicked"), "{}", self.stderr);
        for s in says {
            assert!(self.stderr.contains(s), "the error says {s:?}: {}", self.stderr);
        }
    }

    /// The `checksum` line's value.
    fn checksum(&self) -> String {
        common::checksum(&self.stdout)
    }
}

fn command(args: &[&str], fault: Option<Fault>) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_flumen"));
    cmd.args(args);
    if let Some(f) = fault {
        cmd.env("LD_PRELOAD", injector())
            .env("FLUMEN_FAULT", f.kind)
            .env("FLUMEN_FAULT_PATH", f.path)
            .env("FLUMEN_FAULT_AFTER", f.after.to_string());
    }
    cmd
}

fn flumen(args: &[&str], fault: Option<Fault>) -> Run {
    let out = command(args, fault).output().expect("flumen runs");
    Run {
        status: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into(),
        stderr: String::from_utf8_lossy(&out.stderr).into(),
    }
}

/// Writes `ds` as a pipeline file `name` in `dir`.
fn pipeline(dir: &Path, name: &str, ds: &Dataset) -> String {
    let path = dir.join(name);
    std::fs::write(&path, ds.serialize().unwrap()).unwrap();
    path.to_str().unwrap().to_string()
}

fn lines(path: &str) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_string).collect()
}

fn text(i: usize) -> String {
    format!("record {i:05} {}", "abcdefgh".repeat(i % 7))
}

const RECORDS: usize = 2000;

/// A source file of `RECORDS` records in each format, its reader as a dataset, and the
/// number of records that end within the first `n` bytes, where the test can count them.
struct Input {
    path: String,
    ds: Dataset,
    complete_within: Option<Box<dyn Fn(u64) -> usize>>,
}

fn inputs(dir: &Path) -> Vec<Input> {
    let path = |name: &str| dir.join(name).to_str().unwrap().to_string();
    let mut out = vec![];
    for (name, compression) in [("plain.tfrecord", RecordCompression::None), ("gzip.tfrecord", RecordCompression::Gzip)]
    {
        let p = path(name);
        let mut writer = TfRecordWriter::create(&p, compression).unwrap();
        (0..RECORDS).for_each(|i| writer.write(text(i).as_bytes()).unwrap());
        writer.finish().unwrap();
        let ends: Vec<u64> = (0..RECORDS)
            .scan(0u64, |end, i| {
                *end += 16 + text(i).len() as u64;
                Some(*end)
            })
            .collect();
        let complete_within: Option<Box<dyn Fn(u64) -> usize>> = match compression {
            RecordCompression::None => Some(Box::new(move |n| ends.iter().filter(|&&e| e <= n).count())),
            _ => None,
        };
        out.push(Input { ds: Dataset::tfrecord(&[&p], compression).unwrap(), path: p, complete_within });
    }
    let body: String = (0..RECORDS).map(|i| text(i) + "\n").collect();
    let p = path("lines.txt");
    std::fs::write(&p, &body).unwrap();
    let ends: Vec<u64> = body.match_indices('\n').map(|(at, _)| at as u64 + 1).collect();
    let complete_within: Box<dyn Fn(u64) -> usize> = Box::new(move |n| ends.iter().filter(|&&e| e <= n).count());
    out.push(Input { ds: Dataset::text_lines(&[&p]).unwrap(), path: p, complete_within: Some(complete_within) });

    let p = path("rows.csv");
    let body: String = std::iter::once("id,value,name\n".to_string())
        .chain((0..RECORDS).map(|i| format!("{i},{},{}\n", i as f64 * 0.25, text(i))))
        .collect();
    std::fs::write(&p, &body).unwrap();
    out.push(Input { ds: Dataset::csv(&[&p], CsvOptions::default()).unwrap(), path: p, complete_within: None });

    let batches: Vec<RecordBatch> = (0..RECORDS as i64)
        .step_by(100)
        .map(|start| {
            let ids: Vec<i64> = (start..start + 100).collect();
            RecordBatch::try_from_iter([
                ("id", std::sync::Arc::new(Int64Array::from(ids.clone())) as ArrayRef),
                ("value", std::sync::Arc::new(Float64Array::from_iter_values(ids.iter().map(|&i| i as f64 * 0.25)))),
                ("name", std::sync::Arc::new(StringArray::from_iter_values(ids.iter().map(|&i| text(i as usize))))),
            ])
            .unwrap()
        })
        .collect();
    let schema = batches[0].schema();
    let p = path("rows.parquet");
    let props = parquet::file::properties::WriterProperties::builder().set_max_row_group_row_count(Some(100)).build();
    let mut writer =
        parquet::arrow::ArrowWriter::try_new(std::fs::File::create(&p).unwrap(), schema.clone(), Some(props)).unwrap();
    batches.iter().for_each(|b| writer.write(b).unwrap());
    writer.close().unwrap();
    out.push(Input { ds: Dataset::parquet(&[&p], None).unwrap(), path: p, complete_within: None });

    let p = path("rows.arrow");
    let mut writer = arrow::ipc::writer::FileWriter::try_new(std::fs::File::create(&p).unwrap(), &schema).unwrap();
    batches.iter().for_each(|b| writer.write(b).unwrap());
    writer.finish().unwrap();
    out.push(Input { ds: Dataset::ipc_file(&[&p]).unwrap(), path: p, complete_within: None });

    let p = path("rows.arrows");
    let mut writer = arrow::ipc::writer::StreamWriter::try_new(std::fs::File::create(&p).unwrap(), &schema).unwrap();
    batches.iter().for_each(|b| writer.write(b).unwrap());
    writer.finish().unwrap();
    out.push(Input { ds: Dataset::ipc_stream(&[&p]).unwrap(), path: p, complete_within: None });
    out
}

#[test]
fn a_read_that_fails_midway_ends_the_run_after_every_element_before_it() {
    let tmp = tempfile::tempdir().unwrap();
    for input in inputs(tmp.path()) {
        let plan = pipeline(tmp.path(), "read.json", &input.ds);

        let size = std::fs::metadata(&input.path).unwrap().len();
        // Each shown element: its index and table (the run's summary line after the last cut off).
        let shown = |run: &Run| -> Vec<String> {
            let table = |block: &str| block[..block.rfind("+\n").map_or(block.len(), |end| end + 2)].to_string();
            run.stdout.split("element ").skip(1).map(table).collect()
        };
        let all = flumen(&["run", &plan, "--show", &RECORDS.to_string()], None);
        assert!(all.ok(), "{}", all.stderr);
        let whole = shown(&all);
        assert_eq!(whole.len(), RECORDS, "{}", input.path);
        for after in [size / 3, size / 2, size - 1] {
            let out = tmp.path().join("out.jsonl");
            let out = out.to_str().unwrap();
            let fault = Fault { kind: "eio-read", path: &input.path, after };
            // The elements before the fault are shown; the output is not published.
            let run = flumen(&["run", &plan, "--output", out, "--show", &RECORDS.to_string()], Some(fault));
            run.assert_error(&[&input.path, "Input/output error", "was not written"]);
            assert!(!Path::new(out).exists(), "a failed run publishes no output");
            let got = shown(&run);
            // (A fault in a compressed file's trailer comes after every record.)
            let prefix = got.len() <= whole.len() && got[..] == whole[..got.len()];
            assert!(
                prefix,
                "{} after {after}: {} of {} elements, last {:?}",
                input.path,
                got.len(),
                whole.len(),
                got.last()
            );
            if let Some(complete_within) = &input.complete_within {
                assert_eq!(got.len(), complete_within(after), "{} after {after} bytes", input.path);
            }
        }
    }
}

/// Every element of `ds` (as text) and its errors, pulling at most `bound` times; `cut` runs
/// once, after the first element.
fn drain_with(ds: &Dataset, bound: usize, cut: impl FnOnce()) -> (Vec<String>, Vec<String>) {
    let (mut elements, mut errors) = (vec![], vec![]);
    let mut cut = Some(cut);
    let mut it = ds.iter();
    for _ in 0..bound {
        match it.next() {
            Some(Ok(batch)) => elements.push(arrow::util::pretty::pretty_format_batches(&[batch]).unwrap().to_string()),
            Some(Err(e)) => errors.push(e.to_string()),
            None => return (elements, errors),
        }
        if let Some(cut) = cut.take() {
            cut();
        }
    }
    panic!("the iterator did not end after {bound} pulls");
}

#[test]
fn a_file_cut_or_deleted_while_it_is_read() {
    let tmp = tempfile::tempdir().unwrap();
    let options = Options::default().with_chunk_rows(16);
    for input in inputs(tmp.path()) {
        let ds = input.ds.with_options(options.clone());
        let bytes = std::fs::read(&input.path).unwrap();
        let (whole, errors) = drain_with(&ds, RECORDS + 10, || {});
        assert!(errors.is_empty() && whole.len() == RECORDS, "{}: {errors:?}", input.path);

        // Deleted: the open file stays readable, so every element comes out.
        let (got, errors) = drain_with(&ds, RECORDS + 10, || std::fs::remove_file(&input.path).unwrap());
        assert!(errors.is_empty() && got == whole, "{}: {errors:?}", input.path);
        std::fs::write(&input.path, &bytes).unwrap();

        // Cut to half: what comes out is a prefix, and if anything is missing an error
        // naming the file says so.
        let cut =
            || std::fs::File::options().write(true).open(&input.path).unwrap().set_len(bytes.len() as u64 / 2).unwrap();
        let (got, errors) = drain_with(&ds, RECORDS + 10, cut);
        let prefix = got.len() <= whole.len() && got[..] == whole[..got.len()];
        assert!(prefix, "{}: {} of {} elements, last {:?}", input.path, got.len(), whole.len(), got.last());
        if got.len() < whole.len() {
            assert!(!errors.is_empty(), "{}: {} of {} elements and no error", input.path, got.len(), whole.len());
        }
        assert!(errors.iter().all(|e| e.contains(&input.path)), "{}: {errors:?}", input.path);
        std::fs::write(&input.path, &bytes).unwrap();
    }
}

/// A pipeline of `rows` computed elements.
fn computed(rows: i64) -> Dataset {
    Dataset::range(0, rows)
        .unwrap()
        .map(MapFunction::with_fields([("y", sqrt(cast(col("value"), arrow::datatypes::DataType::Float64)))]))
        .unwrap()
}

/// Files under `dir` (recursively) whose name contains `.tmp`.
fn temporaries(dir: &Path) -> Vec<PathBuf> {
    let mut found = vec![];
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(temporaries(&path));
        } else if path.file_name().unwrap().to_string_lossy().contains(".tmp") {
            found.push(path);
        }
    }
    found
}

#[test]
fn a_full_disk_while_a_cache_or_snapshot_is_written_publishes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let rows = 200_000;
    let plain = pipeline(tmp.path(), "plain.json", &computed(rows).batch(1000).unwrap());
    let reference = flumen(&["run", &plain, "--checksum"], None);
    assert!(reference.ok(), "{}", reference.stderr);

    let cache = tmp.path().join("c.bin");
    let cached = computed(rows).cache_to(cache.to_str().unwrap()).unwrap().batch(1000).unwrap();
    let cached = pipeline(tmp.path(), "cached.json", &cached);
    let snapshots = tmp.path().join("snapshots");
    let snapshotted =
        computed(rows).snapshot(snapshots.to_str().unwrap(), SnapshotOptions::default()).unwrap().batch(1000).unwrap();
    let snapshotted = pipeline(tmp.path(), "snapshotted.json", &snapshotted);

    for after in [0, 1000, 1_000_000] {
        let fault = Fault { kind: "enospc-write", path: "c.bin", after };
        flumen(&["run", &cached, "--checksum"], Some(fault)).assert_error(&["c.bin", "No space left on device"]);
        assert!(!cache.exists(), "no cache is published");
        assert_eq!(temporaries(tmp.path()), Vec::<PathBuf>::new(), "the failed writer removes its temporary file");

        let fault = Fault { kind: "enospc-write", path: "snapshots", after };
        flumen(&["run", &snapshotted, "--checksum"], Some(fault))
            .assert_error(&["snapshots", "No space left on device"]);
        assert!(snapshot_metadata(&snapshots).iter().all(|m| m["finalized"] == false), "nothing finalized");
        assert_eq!(temporaries(tmp.path()), Vec::<PathBuf>::new(), "the failed writer removes its temporary files");
    }
    // The next runs write, then read, and give the same elements as the plain pipeline.
    for plan in [&cached, &cached, &snapshotted, &snapshotted] {
        let run = flumen(&["run", plan, "--checksum"], None);
        assert!(run.ok(), "{}", run.stderr);
        assert_eq!(run.checksum(), reference.checksum(), "{plan}");
    }
    assert!(cache.exists());
    assert!(snapshot_metadata(&snapshots).iter().any(|m| m["finalized"] == true));
}

#[test]
fn a_full_disk_while_a_checkpoint_is_written_keeps_the_one_before() {
    let tmp = tempfile::tempdir().unwrap();
    let plan = pipeline(tmp.path(), "p.json", &computed(5000));
    let path = |name: &str| tmp.path().join(name).to_str().unwrap().to_string();
    let whole = flumen(&["run", &plan, "--output", &path("whole.jsonl")], None);
    assert!(whole.ok(), "{}", whole.stderr);
    let whole = lines(&path("whole.jsonl"));
    let checkpoint = path("ck");
    for mode in ["symbolic", "full"] {
        let save = ["--save-every", "1000", "--checkpoint", &checkpoint, "--checkpoint-mode", mode];
        let first = flumen(&[&["run", &plan, "--limit", "1500"][..], &save].concat(), None);
        assert!(first.ok(), "{}", first.stderr);
        let saved = std::fs::read(&checkpoint).unwrap();

        // The next save (of a run from the start) fails halfway through its bytes.
        let fault = Fault { kind: "enospc-write", path: &checkpoint, after: saved.len() as u64 / 2 };
        flumen(&[&["run", &plan][..], &save].concat(), Some(fault)).assert_error(&["ck", "No space left on device"]);
        assert_eq!(std::fs::read(&checkpoint).unwrap(), saved, "{mode}: the checkpoint before is intact");
        assert_eq!(temporaries(tmp.path()), Vec::<PathBuf>::new());

        let rest = flumen(&["run", &plan, "--restore", &checkpoint, "--output", &path("rest.jsonl")], None);
        assert!(rest.ok() && rest.stderr.contains("at element 1000"), "{}", rest.stderr);
        assert!(lines(&path("rest.jsonl")) == whole[1000..], "{mode}: the run resumes exactly");
    }
}

#[test]
fn permission_denied_is_an_error_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let input = &inputs(tmp.path())[0];
    let read = pipeline(tmp.path(), "read.json", &input.ds);
    let fault = Fault { kind: "eacces-open", path: &input.path, after: 0 };
    flumen(&["run", &read], Some(fault)).assert_error(&[&input.path, "Permission denied"]);

    let cache = tmp.path().join("c.bin");
    let cached = pipeline(tmp.path(), "cached.json", &computed(1000).cache_to(cache.to_str().unwrap()).unwrap());
    let fault = Fault { kind: "eacces-open", path: "c.bin", after: 0 };
    flumen(&["run", &cached], Some(fault)).assert_error(&["c.bin", "Permission denied"]);
    assert!(!cache.exists());

    let snapshots = tmp.path().join("snapshots");
    let snapshotted = computed(1000).snapshot(snapshots.to_str().unwrap(), SnapshotOptions::default()).unwrap();
    let snapshotted = pipeline(tmp.path(), "snapshotted.json", &snapshotted);
    let fault = Fault { kind: "eacces-open", path: "snapshots", after: 0 };
    flumen(&["run", &snapshotted], Some(fault)).assert_error(&["snapshots", "Permission denied"]);
    assert!(snapshot_metadata(&snapshots).iter().all(|m| m["finalized"] == false));

    let checkpoint = tmp.path().join("ck");
    let checkpoint = checkpoint.to_str().unwrap();
    let plan = pipeline(tmp.path(), "p.json", &computed(1000));
    let fault = Fault { kind: "eacces-open", path: "ck", after: 0 };
    let run = flumen(&["run", &plan, "--save-every", "100", "--checkpoint", checkpoint], Some(fault));
    run.assert_error(&["ck", "Permission denied"]);
    let run = flumen(&["run", &plan, "--restore", checkpoint], Some(fault));
    run.assert_error(&["ck", "Permission denied"]);
}

/// How many kill -9 trials each kind of write gets.
fn kill_trials() -> u64 {
    std::env::var("FLUMEN_KILL_TRIALS").ok().and_then(|v| v.parse().ok()).unwrap_or(3)
}

/// A deterministic sequence of delays in `0..span` (splitmix64 over the trial number).
fn delay(trial: u64, span: Duration) -> Duration {
    let mut z = trial.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    span.mul_f64((z >> 11) as f64 / (1u64 << 53) as f64)
}

/// Starts `args`, kills it with SIGKILL after `after` unless it ends first, and waits;
/// returns whether it was killed.
fn kill_after(args: &[&str], after: Duration) -> bool {
    let mut child = command(args, None).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
    let start = Instant::now();
    while start.elapsed() < after {
        if child.try_wait().unwrap().is_some() {
            return false;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let _ = child.kill();
    child.wait().unwrap();
    true
}

/// How long an uninterrupted run of `args` takes.
fn duration_of(args: &[&str]) -> Duration {
    let start = Instant::now();
    let run = flumen(args, None);
    assert!(run.ok(), "{}", run.stderr);
    start.elapsed()
}

#[test]
fn killed_cache_and_snapshot_writers_never_leave_a_readable_partial_file() {
    let tmp = tempfile::tempdir().unwrap();
    let rows = 300_000;
    let plain = pipeline(tmp.path(), "plain.json", &computed(rows).batch(1000).unwrap());
    let reference = flumen(&["run", &plain, "--checksum"], None);
    assert!(reference.ok(), "{}", reference.stderr);
    for kind in ["cache", "snapshot"] {
        // The pipeline storing into `dir`, written there.
        let plan_in = |dir: &Path| {
            std::fs::create_dir(dir).unwrap();
            let target = dir.join("store");
            let target = target.to_str().unwrap();
            let stored = match kind {
                "cache" => computed(rows).cache_to(target).unwrap(),
                // An expiry of zero lets the next run take over what a killed one left pending.
                _ => computed(rows)
                    .snapshot(target, SnapshotOptions::default().with_pending_expiry(Duration::ZERO))
                    .unwrap(),
            };
            pipeline(dir, "p.json", &stored.batch(1000).unwrap())
        };
        // Within the run's time, so that nearly every trial kills a writer at work.
        let span = duration_of(&["run", &plan_in(&tmp.path().join(kind))]).mul_f64(0.8);
        let (mut killed, mut published) = (0, 0);
        for trial in 0..kill_trials() {
            let dir = tmp.path().join(format!("{kind}-{trial}"));
            let plan = plan_in(&dir);
            killed += usize::from(kill_after(&["run", &plan], delay(trial, span)));
            let store = dir.join("store");
            published += usize::from(match kind {
                "cache" => store.exists(),
                _ => snapshot_metadata(&store).iter().any(|m| m["finalized"] == true),
            });
            // Whatever the kill left, a run reads only what is complete: the next two runs
            // (the first may write, the second reads what it wrote) give the right elements.
            for _ in 0..2 {
                let run = flumen(&["run", &plan, "--checksum"], None);
                assert!(run.ok(), "{kind} trial {trial}: {}", run.stderr);
                assert_eq!(run.checksum(), reference.checksum(), "{kind} trial {trial}");
            }
            std::fs::remove_dir_all(&dir).unwrap();
        }
        eprintln!("{kind}: {} trials, {killed} killed, {published} left a published {kind}", kill_trials());
    }
}

#[test]
fn killed_checkpoint_writers_never_leave_a_checkpoint_that_restores_wrongly() {
    let tmp = tempfile::tempdir().unwrap();
    let path = |name: &str| tmp.path().join(name).to_str().unwrap().to_string();
    let plan = pipeline(tmp.path(), "p.json", &computed(20_000));
    let whole = flumen(&["run", &plan, "--output", &path("whole.jsonl")], None);
    assert!(whole.ok(), "{}", whole.stderr);
    let whole = lines(&path("whole.jsonl"));
    let checkpoint = path("ck");
    let save = ["run", &plan, "--save-every", "500", "--checkpoint", &checkpoint, "--checkpoint-mode", "full"];
    let span = duration_of(&save).mul_f64(0.8);
    let (mut killed, mut restored) = (0, 0);
    for trial in 0..kill_trials() {
        let _ = std::fs::remove_file(&checkpoint);
        killed += usize::from(kill_after(&save, delay(trial, span)));
        let Ok(bytes) = std::fs::read(&checkpoint) else { continue };
        let rest = flumen(&["run", &plan, "--restore", &checkpoint, "--output", &path("rest.jsonl")], None);
        assert!(rest.ok(), "trial {trial}: {}", rest.stderr);
        let at: usize = rest.stderr.split("at element ").nth(1).unwrap().trim().parse().unwrap();
        assert!(lines(&path("rest.jsonl")) == whole[at..], "trial {trial}: resumed at {at}");
        restored += 1;
        // A damaged copy is refused, never restored.
        let damaged = path("damaged");
        let mut file = std::fs::File::create(&damaged).unwrap();
        file.write_all(&bytes[..bytes.len() - 1 - (trial as usize % (bytes.len() - 1))]).unwrap();
        flumen(&["run", &plan, "--restore", &damaged], None).assert_error(&["damaged"]);
    }
    eprintln!("checkpoint: {} trials, {killed} killed, {restored} restored", kill_trials());
    // The delays spread over the whole run, so most trials find a checkpoint.
    assert!(kill_trials() < 3 || restored > 0, "no trial found a checkpoint");
}

/// The bytes of the files under `dir`, recursively.
fn disk_used(dir: &Path) -> u64 {
    let mut bytes = 0;
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        bytes += if path.is_dir() { disk_used(&path) } else { entry.metadata().unwrap().len() };
    }
    bytes
}

#[test]
fn killed_writers_leave_nothing_once_a_run_completes() {
    // After kills of `cache_to` writers, every killed writer's `store.tmp-*` stayed beside
    // the published cache (49 files, 462 MB after 30 kills), and a snapshot's metadata
    // temporaries stayed too.
    let tmp = tempfile::tempdir().unwrap();
    let rows = 300_000;
    for kind in ["cache", "snapshot", "checkpoint"] {
        let plan_in = |dir: &Path| {
            std::fs::create_dir(dir).unwrap();
            let target = dir.join("store");
            let target = target.to_str().unwrap();
            let ds = match kind {
                "cache" => computed(rows).cache_to(target).unwrap().batch(1000).unwrap(),
                "snapshot" => computed(rows)
                    .snapshot(target, SnapshotOptions::default().with_pending_expiry(Duration::ZERO))
                    .unwrap()
                    .batch(1000)
                    .unwrap(),
                _ => computed(20_000),
            };
            let plan = pipeline(dir, "p.json", &ds);
            let checkpoint = dir.join("ck").to_str().unwrap().to_string();
            let args: Vec<String> = match kind {
                "checkpoint" => {
                    ["run", &plan, "--save-every", "500", "--checkpoint", &checkpoint, "--checkpoint-mode", "full"]
                        .map(String::from)
                        .to_vec()
                }
                _ => vec!["run".to_string(), plan],
            };
            args
        };
        // One uninterrupted run: its time, and the disk it leaves.
        let single = tmp.path().join(format!("{kind}-single"));
        let args = plan_in(&single);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let span = duration_of(&args).mul_f64(0.8);
        let expected = disk_used(&single);

        // (A name as long as the other's: the pipeline file holds it.)
        let dir = tmp.path().join(format!("{kind}-killed"));
        let args = plan_in(&dir);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        for trial in 0..kill_trials() {
            kill_after(&args, delay(trial, span));
        }
        let run = flumen(&args, None);
        assert!(run.ok(), "{kind}: {}", run.stderr);
        assert_eq!(temporaries(&dir), Vec::<PathBuf>::new(), "{kind}: no killed writer's file is left");
        // A checkpoint's bytes vary by a few between runs (the tuned values it stores).
        let slack = if kind == "checkpoint" { expected / 100 } else { 0 };
        let used = disk_used(&dir);
        assert!(used.abs_diff(expected) <= slack, "{kind}: {used} bytes, one uninterrupted run {expected}");
    }
}
