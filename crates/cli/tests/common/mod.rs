//! Helpers shared by the `flumen` binary's tests.

/// The snapshot metadata documents under `dir` (one per snapshot, any run's).
pub fn snapshot_metadata(dir: &std::path::Path) -> Vec<serde_json::Value> {
    let Ok(entries) = std::fs::read_dir(dir) else { return vec![] };
    entries
        .filter_map(|e| std::fs::read_to_string(e.unwrap().path().join("snapshot.metadata")).ok())
        .map(|t| serde_json::from_str(&t).unwrap())
        .collect()
}

/// The value of the `checksum` line of a run's `stdout`.
pub fn checksum(stdout: &str) -> String {
    stdout.lines().find_map(|l| l.strip_prefix("checksum ")).expect("a checksum line").to_string()
}
