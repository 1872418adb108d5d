//! Crash-safe replacement of a file: write a temporary file in the same
//! directory, fsync it, rename it over the final name, fsync the directory.
//! A crash at any point leaves the final name holding either the old
//! complete file or the new complete file, and a failed write (a full disk)
//! removes the temporary file and leaves the old one untouched.
//!
//! A process killed mid-write leaves its temporary behind (it never carries
//! a final name, so it is harmless, only untidy); [`remove_stale_temps`]
//! clears those of processes that no longer run.

use std::fs::{self, File};
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{Error, Result};

/// Marker inside temporary names; a store never lists such files.
const TMP_MARKER: &str = ".tmp-";

/// Big enough that the small writes (heads, index) batch into few syscalls;
/// tensor buffers larger than this go to the file directly.
const WRITE_BUFFER: usize = 1 << 20;

/// Atomically replaces `path` with `bytes` (temporary file, fsync, rename,
/// fsync of the directory): after a crash `path` holds the old or the new
/// contents, never a mix. For any small file that must never be seen half
/// written (a manifest, a metrics log being rewritten, a config record).
pub fn write_file_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    write_atomic(path, |w| std::io::Write::write_all(w, bytes))
}

/// Removes from `dir` the temporary files [`write_file_atomic`] (or a
/// checkpoint save) left behind for final names `owns` accepts, when the
/// process that wrote each one no longer runs: a save in flight in a live
/// process (this one included) is never disturbed. Where liveness cannot be
/// checked (not Linux) a temporary counts as stale after an hour. Returns
/// how many were removed.
pub fn remove_stale_temps(dir: &Path, owns: impl Fn(&str) -> bool) -> Result<usize> {
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(Error::io(dir, "list", e)),
    };
    let mut removed = 0;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, "list", e))?;
        let name = entry.file_name();
        let Some((target, pid)) = name.to_str().and_then(parse_temp_name) else {
            continue;
        };
        if !owns(target) || writer_may_run(pid, &entry.path()) {
            continue;
        }
        match fs::remove_file(entry.path()) {
            Ok(()) => removed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(entry.path(), "remove", e)),
        }
    }
    Ok(removed)
}

/// `(final name, writer pid)` of a temporary name `.<name>.tmp-<pid>-<n>`.
fn parse_temp_name(name: &str) -> Option<(&str, u32)> {
    let rest = name.strip_prefix('.')?;
    let at = rest.rfind(TMP_MARKER)?;
    let (target, tail) = (&rest[..at], &rest[at + TMP_MARKER.len()..]);
    let (pid, n) = tail.split_once('-')?;
    if target.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || n.is_empty() {
        return None;
    }
    Some((target, pid.parse().ok()?))
}

/// Whether the process that wrote a temporary may still be writing it.
fn writer_may_run(pid: u32, path: &Path) -> bool {
    if pid == std::process::id() {
        return true;
    }
    if cfg!(target_os = "linux") {
        return Path::new("/proc").join(pid.to_string()).exists();
    }
    let age = fs::metadata(path)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| t.elapsed().ok());
    age.is_none_or(|a| a < std::time::Duration::from_secs(3600))
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn temp_names_parse_back_to_their_target_and_writer() {
        let tmp = temp_name(Path::new("dir/metrics.csv")).unwrap();
        let name = tmp.file_name().unwrap().to_str().unwrap();
        assert_eq!(
            parse_temp_name(name),
            Some(("metrics.csv", std::process::id()))
        );
        assert_eq!(parse_temp_name(".a.tmp-12-3"), Some(("a", 12)));
        assert_eq!(parse_temp_name("a.tmp-12-3"), None);
        assert_eq!(parse_temp_name(".a.tmp-x-3"), None);
        assert_eq!(parse_temp_name("..tmp-1-2"), None);
    }

    #[test]
    fn only_temporaries_of_dead_writers_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        // pid 0 never names a user process; this process is alive.
        let dead = format!(".metrics.csv{TMP_MARKER}0-1");
        let mine = format!(".metrics.csv{TMP_MARKER}{}-1", std::process::id());
        let foreign = format!(".notes.txt{TMP_MARKER}0-1");
        for n in [&dead, &mine, &foreign, &"metrics.csv".to_string()] {
            fs::write(dir.path().join(n), b"x").unwrap();
        }
        let removed = remove_stale_temps(dir.path(), |t| t == "metrics.csv").unwrap();
        assert_eq!(removed, usize::from(cfg!(target_os = "linux")));
        assert!(dir.path().join(&mine).exists());
        assert!(dir.path().join(&foreign).exists());
        assert!(dir.path().join("metrics.csv").exists());
    }
}
