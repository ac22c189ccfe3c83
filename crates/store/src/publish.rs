//! Temporary files beside their final path, and their atomic publication.
//!
//! Everything this crate makes visible under a final name (a cache file, snapshot metadata)
//! is written completely to a temporary file in the same directory first, synced, and then
//! published in one step, so a reader never sees a partial file:
//!
//! - [`TempFile::publish_new`] hard-links the temporary file to the final name, which fails if
//!   the name exists: the first publisher wins and later ones learn they lost (an exclusive
//!   create, like `O_EXCL`, but of a complete file);
//! - [`TempFile::publish_replace`] renames it over the final name.
//!
//! A temporary file that is never published is removed when dropped. A killed process leaves
//! it behind under a name (`<final>.tmp-<host>-<pid>-<random>`) that no reader opens, and
//! the next writer or reader of the same final path removes it (`reclaim`): at once when
//! its host is this one and its process no longer runs, or once it has not changed for the
//! snapshot's default pending expiry (a day) when it belongs to another host, whose
//! processes cannot be seen from here.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use flumen_ir::{Error, Result};

/// A file being written beside its final path.
pub struct TempFile {
    path: PathBuf,
    published: bool,
}

impl TempFile {
    /// Creates a new, empty temporary file beside `target`.
    pub fn create(target: &Path) -> Result<(TempFile, File)> {
        reclaim(target);
        let mut name = OsString::from(target.as_os_str());
        name.push(format!(".tmp-{}-{}-{:016x}", host(), std::process::id(), rand::random::<u64>()));
        let path = PathBuf::from(name);
        let file = OpenOptions::new().write(true).create_new(true).open(&path).map_err(|e| io_error(&path, e))?;
        Ok((TempFile { path, published: false }, file))
    }

    /// Writes `bytes` to a new temporary file beside `target` and syncs it.
    pub(crate) fn with_contents(target: &Path, bytes: &[u8]) -> Result<TempFile> {
        let (temp, mut file) = TempFile::create(target)?;
        file.write_all(bytes).and_then(|()| file.sync_all()).map_err(|e| io_error(&temp.path, e))?;
        Ok(temp)
    }

    /// The temporary file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Publishes the file at `target` unless something is already there; returns whether it
    /// did. Either way the temporary name goes away.
    pub fn publish_new(self, target: &Path) -> Result<bool> {
        match fs::hard_link(&self.path, target) {
            Ok(()) => {
                sync_parent(target)?;
                Ok(true)
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(io_error(target, e)),
        }
    }

    /// Publishes the file at `target`, replacing what is there.
    pub fn publish_replace(mut self, target: &Path) -> Result<()> {
        fs::rename(&self.path, target).map_err(|e| io_error(target, e))?;
        self.published = true;
        sync_parent(target)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.published {
            // Best effort: a leftover temporary file is never read, only wasted space.
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// This host's name, as temporary files carry it ("localhost" where it cannot be read).
fn host() -> &'static str {
    static HOST: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    HOST.get_or_init(|| {
        let name = fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        match name.trim() {
            "" => "localhost".to_string(),
            name => name.to_string(),
        }
    })
}

/// Whether process `pid` of this host still runs (`true` where that cannot be told).
fn alive(pid: u32) -> bool {
    let proc = Path::new("/proc");
    !proc.is_dir() || proc.join(pid.to_string()).exists()
}

/// Removes the temporary files beside `target` that their writers left when they were
/// killed: those of this host whose process no longer runs, and those of other hosts
/// unchanged for a day. Best effort: a file that cannot be removed is only wasted space.
pub(crate) fn reclaim(target: &Path) {
    let (Some(dir), Some(file)) = (target.parent(), target.file_name()) else { return };
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    let prefix = format!("{}.tmp-", file.to_string_lossy());
    let Ok(entries) = fs::read_dir(dir) else { return };
    let this_host = host();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(rest) = name.strip_prefix(&prefix) else { continue };
        // `<host>-<pid>-<random>`, the host possibly holding dashes; `<pid>-<random>` from
        // before hosts were named.
        let mut parts = rest.rsplitn(3, '-');
        let (_random, pid, owner) = (parts.next(), parts.next(), parts.next());
        let (pid, owner) = match (pid, owner) {
            (Some(pid), Some(owner)) => (pid, owner),
            (Some(_), None) => (rest.split('-').next().unwrap_or(""), this_host),
            _ => continue,
        };
        let Ok(pid) = pid.parse::<u32>() else { continue };
        let stale = if owner == this_host {
            pid != std::process::id() && !alive(pid)
        } else {
            let age = entry.metadata().and_then(|m| m.modified()).ok().and_then(|t| t.elapsed().ok());
            age.is_some_and(|age| age > crate::snapshot::DEFAULT_PENDING_EXPIRY)
        };
        if stale {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Makes a new or renamed directory entry durable: syncing a file does not sync its name.
fn sync_parent(path: &Path) -> Result<()> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    if cfg!(unix) {
        File::open(parent).and_then(|dir| dir.sync_all()).map_err(|e| io_error(parent, e))?;
    }
    Ok(())
}

pub(crate) fn io_error(path: &Path, e: io::Error) -> Error {
    Error::io(path.display().to_string(), e)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reclaim_removes_what_dead_writers_left_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("c.bin");
        // A process that has ended: its pid no longer runs.
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let me = std::process::id();
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(2 * 24 * 3600);
        let files = [
            (format!("c.bin.tmp-{}-{dead}-00000000000000aa", host()), false),
            (format!("c.bin.tmp-{dead}-00000000000000bb"), false),
            (format!("c.bin.tmp-{}-{me}-00000000000000cc", host()), true),
            ("c.bin.tmp-other-host-1-00000000000000dd".to_string(), true),
            ("c.bin.tmp-old-host-1-00000000000000ee".to_string(), false),
            ("d.bin.tmp-1-00000000000000ff".to_string(), true),
            ("c.bin".to_string(), true),
        ];
        for (name, _) in &files {
            let file = File::create(dir.path().join(name)).unwrap();
            if name.contains("old-host") {
                file.set_modified(old).unwrap();
            }
        }
        reclaim(&target);
        for (name, kept) in &files {
            assert_eq!(dir.path().join(name).exists(), *kept, "{name}");
        }
    }
}
