//! Snapshots across processes: the test binary re-runs itself as a child (the `child` test,
//! a no-op unless `FLUMEN_STORE_CHILD` names a role), so two processes race for one snapshot
//! and a writer is killed with SIGKILL mid-write.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use flumen_store::{ChunkFileReader, Compression, Decision, Finished};

use crate::common::{chunks, ids, names};
use crate::snapshot::{begin, expect_read, expect_write, metadata, options, read_all, write_all, DAY, FINGERPRINT};

const ROLE: &str = "FLUMEN_STORE_CHILD";
const DIR: &str = "FLUMEN_STORE_DIR";
/// Seconds the child adds to its clock: a day or more makes it take over a pending snapshot.
const CLOCK_AHEAD: &str = "FLUMEN_STORE_CLOCK_AHEAD";
/// First id of the rows the child writes, so the parent can tell whose rows it reads.
const FIRST_ID: &str = "FLUMEN_STORE_FIRST_ID";
/// A file the child creates once it has begun writing.
const STARTED: &str = "FLUMEN_STORE_STARTED";
/// A file the child waits for before finishing its write.
const GO: &str = "FLUMEN_STORE_GO";
/// Where the child records how its run ended.
const RESULT: &str = "FLUMEN_STORE_RESULT";

/// How long the parent waits for a child's file before failing: generous, since it only
/// bounds a broken test; a healthy run waits milliseconds.
const PATIENCE: Duration = Duration::from_secs(60);

/// The child side. As a plain test it does nothing.
#[test]
fn child() {
    let Ok(role) = std::env::var(ROLE) else { return };
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
    let dir = PathBuf::from(var(DIR));
    let ahead = Duration::from_secs(var(CLOCK_AHEAD).parse().unwrap());
    let first_id: i64 = var(FIRST_ID).parse().unwrap();
    let opts = options(2, Compression::Lz4);
    let decision = begin(&dir, &opts, SystemTime::now() + ahead);
    match role.as_str() {
        "write" => {
            let outcome = match decision {
                Decision::Write(mut writer) => {
                    let data = chunks(first_id, 10, 100);
                    for b in &data[..5] {
                        writer.write(b.clone()).unwrap();
                    }
                    if let Ok(started) = std::env::var(STARTED) {
                        std::fs::write(started, b"").unwrap();
                    }
                    if let Ok(go) = std::env::var(GO) {
                        assert!(wait_for(Path::new(&go)), "no go signal");
                    }
                    for b in &data[5..] {
                        writer.write(b.clone()).unwrap();
                    }
                    match writer.finish().unwrap() {
                        Finished::Finalized(_) => "finalized",
                        Finished::Lost => "lost",
                    }
                }
                Decision::Read(_) => "read",
                Decision::Passthrough => "passthrough",
            };
            std::fs::write(var(RESULT), outcome).unwrap();
        }
        "write-until-killed" => {
            let mut writer = expect_write(decision);
            // Bounded, so an orphaned child still ends; the parent kills it long before.
            for (i, b) in chunks(first_id, 20_000, 100).into_iter().enumerate() {
                writer.write(b).unwrap();
                if i == 20 {
                    std::fs::write(var(STARTED), b"").unwrap();
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            writer.finish().unwrap();
        }
        other => panic!("unknown child role {other}"),
    }
}

/// Starts the child test in a new process with `role` and the given variables.
fn spawn(role: &str, dir: &Path, vars: &[(&str, String)]) -> Child {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.args(["--exact", "processes::child", "--nocapture", "--test-threads=1"]);
    command.env(ROLE, role).env(DIR, dir).env(CLOCK_AHEAD, "0").env(FIRST_ID, "0");
    for (name, value) in vars {
        command.env(name, value);
    }
    // Captured, so the child's test report does not mix into the parent's.
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    command.spawn().unwrap()
}

/// Polls for `path` to exist, up to [`PATIENCE`].
fn wait_for(path: &Path) -> bool {
    let deadline = Instant::now() + PATIENCE;
    while Instant::now() < deadline {
        if path.exists() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    false
}

fn succeed(child: Child) {
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "child failed: {}\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

fn result(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap()
}

#[test]
fn two_processes_racing_for_one_snapshot_finalize_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let signals = tempfile::tempdir().unwrap();
    let file = |name: &str| signals.path().join(name);
    // The first writer holds its pass open until the second has taken over and finished.
    let first = spawn(
        "write",
        dir.path(),
        &[
            (FIRST_ID, "1000000".into()),
            (STARTED, file("first-started").display().to_string()),
            (GO, file("go").display().to_string()),
            (RESULT, file("first").display().to_string()),
        ],
    );
    assert!(wait_for(&file("first-started")), "the first writer never started");
    let second = spawn(
        "write",
        dir.path(),
        &[(CLOCK_AHEAD, (2 * DAY).as_secs().to_string()), (RESULT, file("second").display().to_string())],
    );
    succeed(second);
    std::fs::write(file("go"), b"").unwrap();
    succeed(first);
    assert_eq!(result(&file("first")), "lost");
    assert_eq!(result(&file("second")), "finalized");
    let reader = expect_read(begin(dir.path(), &options(2, Compression::Lz4), SystemTime::now()));
    assert_eq!(ids(&read_all(reader)), (0..1000).collect::<Vec<_>>(), "the winner's rows");
    let run_id = metadata(dir.path()).run_id;
    assert_eq!(names(&dir.path().join(FINGERPRINT)), [run_id, "snapshot.metadata".to_string()], "one run is left");
}

#[test]
fn two_processes_starting_at_once_write_one_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let signals = tempfile::tempdir().unwrap();
    let outcomes: Vec<PathBuf> = ["a", "b"].iter().map(|n| signals.path().join(n)).collect();
    let children: Vec<Child> =
        outcomes.iter().map(|o| spawn("write", dir.path(), &[(RESULT, o.display().to_string())])).collect();
    children.into_iter().for_each(succeed);
    let mut results: Vec<String> = outcomes.iter().map(|o| result(o)).collect();
    results.sort();
    // The second to start either saw the first's pending snapshot or, if it was already
    // done, its finalized one.
    assert!(results == ["finalized", "passthrough"] || results == ["finalized", "read"], "{results:?}");
    let reader = expect_read(begin(dir.path(), &options(2, Compression::Lz4), SystemTime::now()));
    assert_eq!(ids(&read_all(reader)), (0..1000).collect::<Vec<_>>());
}

#[test]
fn a_killed_writer_never_leaves_a_readable_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let signals = tempfile::tempdir().unwrap();
    let started = signals.path().join("started");
    let mut child = spawn("write-until-killed", dir.path(), &[(STARTED, started.display().to_string())]);
    assert!(wait_for(&started), "the writer never started");
    child.kill().unwrap();
    child.wait().unwrap();
    let dead = metadata(dir.path());
    assert!(!dead.finalized);
    // Its partial shards are truncated chunk files.
    let shard = dir.path().join(FINGERPRINT).join(&dead.run_id).join("00000000.shard");
    if let Ok(reader) = ChunkFileReader::open(&shard) {
        let last = reader.last().expect("a killed writer's shard ends in an error");
        assert!(last.is_err(), "a killed writer's shard reads as truncated");
    }

    let opts = options(2, Compression::Lz4);
    let now = SystemTime::now();
    assert!(matches!(begin(dir.path(), &opts, now), Decision::Passthrough), "fresh pending: pass through");
    let data = chunks(0, 6, 100);
    let writer = expect_write(begin(dir.path(), &opts, now + 2 * DAY));
    assert!(matches!(write_all(writer, &data), Finished::Finalized(_)));
    assert_eq!(read_all(expect_read(begin(dir.path(), &opts, now))), data);
    assert!(!dir.path().join(FINGERPRINT).join(&dead.run_id).exists(), "the dead run's files are removed");
}
