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
//! A temporary file that is never published is removed when dropped; a killed process leaves
//! it behind under a name (`<final>.tmp-<pid>-<random>`) that no reader opens.

use std::ffi::OsString;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use flumen_ir::{Error, Result};

/// A file being written beside its final path.
pub(crate) struct TempFile {
    path: PathBuf,
    published: bool,
}

impl TempFile {
    /// Creates a new, empty temporary file beside `target`.
    pub(crate) fn create(target: &Path) -> Result<(TempFile, File)> {
        let mut name = OsString::from(target.as_os_str());
        name.push(format!(".tmp-{}-{:016x}", std::process::id(), rand::random::<u64>()));
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
    pub(crate) fn publish_new(self, target: &Path) -> Result<bool> {
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
    pub(crate) fn publish_replace(mut self, target: &Path) -> Result<()> {
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
