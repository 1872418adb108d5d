//! Crash-safe replacement of a file: write a temporary file in the same
//! directory, fsync it, rename it over the final name, fsync the directory.
//! A crash at any point leaves the final name holding either the old
//! complete file or the new complete file, and a failed write (a full disk)
//! removes the temporary file and leaves the old one untouched.

use std::fs::{self, File};
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{Error, Result};

/// Marker inside temporary names; a store never lists such files.
pub(crate) const TMP_MARKER: &str = ".tmp-";

/// Big enough that the small writes (heads, index) batch into few syscalls;
/// tensor buffers larger than this go to the file directly.
const WRITE_BUFFER: usize = 1 << 20;

/// Atomically replaces `path` with what `write` produces.
pub(crate) fn write_atomic(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
) -> Result<()> {
    let tmp = temp_name(path)?;
    let result = write_then_rename(path, &tmp, write);
    if result.is_err() {
        // Best effort: the temporary never carries the final name, so a
        // leftover is harmless, only untidy.
        let _ = fs::remove_file(&tmp);
    }
    result
}

fn write_then_rename(
    path: &Path,
    tmp: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> std::io::Result<()>,
) -> Result<()> {
    let file = File::options()
        .write(true)
        .create_new(true)
        .open(tmp)
        .map_err(|e| Error::io(tmp, "create", e))?;
    let mut w = BufWriter::with_capacity(WRITE_BUFFER, file);
    write(&mut w).map_err(|e| Error::io(tmp, "write", e))?;
    let file = w
        .into_inner()
        .map_err(|e| Error::io(tmp, "write", e.into_error()))?;
    file.sync_all().map_err(|e| Error::io(tmp, "fsync", e))?;
    drop(file);
    fs::rename(tmp, path).map_err(|e| Error::io(path, "rename", e))?;
    sync_dir(path)
}

/// Makes the rename itself durable.
fn sync_dir(path: &Path) -> Result<()> {
    let dir = parent(path);
    #[cfg(unix)]
    File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(&dir, "fsync directory", e))?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

fn parent(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// `.<name>.tmp-<pid>-<n>` beside `path`: hidden, unique per process and
/// call, and never matching a final checkpoint name.
fn temp_name(path: &Path) -> Result<PathBuf> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .ok_or_else(|| Error::Config(format!("`{}` names no file", path.display())))?;
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let tmp = format!(
        ".{}{TMP_MARKER}{}-{n}",
        name.to_string_lossy(),
        std::process::id()
    );
    Ok(parent(path).join(tmp))
}

/// Whether `name` is a temporary file written by [`write_atomic`].
pub(crate) fn is_temp_name(name: &str) -> bool {
    name.starts_with('.') && name.contains(TMP_MARKER)
}
