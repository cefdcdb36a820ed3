//! The lock pi takes on `auth.json` (pi 0.73.1 and 1.6.0 use `proper-lockfile`): a directory
//! `<auth.json>.lock` made with `mkdir` (atomic: whoever creates it holds the lock), whose mtime
//! the holder refreshes while it works; a lock whose mtime is older than the stale limit belongs
//! to a dead process and is removed. pi 1.6.0 locks the resolved path of auth.json (0.73.1's
//! refresh did too), and so does pi-rs. pi and pi-rs sharing an agent dir therefore never refresh
//! or write the same login at once, so neither loses the other's refreshed token.
//!
//! Bounds: acquiring retries with backoff for at most `ACQUIRE_TIMEOUT`, and stops at once when
//! the caller's cancel flag is raised (never a busy loop: a stale lock that cannot be removed —
//! a file, or a folder someone put files in — is waited on like a held one); while held, a keeper
//! thread touches the directory every `TOUCH_INTERVAL` (pi's own holders do the same every
//! stale/2), and the lock is removed when the guard drops.

use std::fs;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use crossbeam_channel::{Sender, bounded};

use crate::child::CancelFlag;

/// pi's refresh uses `stale: 30000`; its synchronous writers use proper-lockfile's default 10 s.
/// A lock untouched for longer than the larger of the two is abandoned.
const STALE: Duration = Duration::from_secs(30);
/// pi 1.6.0 waits up to 30 s for another holder (0.73.1: 10 retries with backoff).
const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(30);
/// Below pi's shortest stale limit (10 s) with room to spare.
const TOUCH_INTERVAL: Duration = Duration::from_secs(2);

/// A held lock; dropping it stops the keeper and removes the directory.
pub struct AuthLock {
    dir: PathBuf,
    stop: Option<Sender<()>>,
    keeper: Option<std::thread::JoinHandle<()>>,
}

impl Drop for AuthLock {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(keeper) = self.keeper.take() {
            let _ = keeper.join();
        }
        if let Err(e) = fs::remove_dir(&self.dir) {
            log::warn!("cannot remove the lock {}: {e}", self.dir.display());
        }
    }
}

/// The lock could not be taken.
#[derive(Debug)]
pub enum LockError {
    /// Another process held it past the wait.
    Held { file: PathBuf, dir: PathBuf },
    /// The caller gave up waiting (abort, shutdown).
    Cancelled,
    Io {
        file: PathBuf,
        source: std::io::Error,
    },
}

impl std::fmt::Display for LockError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LockError::Held { file, dir } => write!(
                f,
                "{} is locked by another process (remove {} if no pi is running)",
                file.display(),
                dir.display()
            ),
            LockError::Io { file, source } => {
                write!(f, "cannot lock {}: {source}", file.display())
            }
            LockError::Cancelled => write!(f, "aborted while waiting for the auth.json lock"),
        }
    }
}

impl std::error::Error for LockError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            LockError::Io { source, .. } => Some(source),
            LockError::Held { .. } | LockError::Cancelled => None,
        }
    }
}

/// The lock directory of `file` (`<file>.lock`, as proper-lockfile names it).
pub fn lock_dir(file: &Path) -> PathBuf {
    let mut name = file.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Takes the lock on `file`, waiting (bounded) while another process holds it. Like pi, the
/// lock belongs to the resolved file, so symlinked aliases of auth.json share one lock.
pub fn lock(file: &Path, cancel: &CancelFlag) -> Result<AuthLock, LockError> {
    let resolved = fs::canonicalize(file).unwrap_or_else(|_| file.to_path_buf());
    lock_with(&resolved, ACQUIRE_TIMEOUT, STALE, cancel)
}

fn lock_with(
    file: &Path,
    timeout: Duration,
    stale: Duration,
    cancel: &CancelFlag,
) -> Result<AuthLock, LockError> {
    let dir = lock_dir(file);
    let started = Instant::now();
    let mut delay = Duration::from_millis(50);
    let mut warned = false;
    loop {
        match fs::create_dir(&dir) {
            Ok(()) => break,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                if is_stale(&dir, stale) {
                    match fs::remove_dir(&dir) {
                        Ok(()) => {
                            log::warn!("removed the abandoned lock {}", dir.display());
                            continue;
                        }
                        // A file or a non-empty folder: not a lock pi-rs may remove; wait as for
                        // a held one (bounded), never loop on it.
                        Err(e) if !warned => {
                            warned = true;
                            log::warn!("cannot remove the stale lock {}: {e}", dir.display());
                        }
                        Err(_) => {}
                    }
                }
                if started.elapsed() >= timeout {
                    return Err(LockError::Held {
                        file: file.to_path_buf(),
                        dir,
                    });
                }
                let wake = Instant::now() + delay.min(timeout.saturating_sub(started.elapsed()));
                while Instant::now() < wake {
                    if cancel.is_cancelled() {
                        return Err(LockError::Cancelled);
                    }
                    std::thread::sleep(
                        wake.saturating_duration_since(Instant::now())
                            .min(Duration::from_millis(20)),
                    );
                }
                if cancel.is_cancelled() {
                    return Err(LockError::Cancelled);
                }
                delay = (delay * 2).min(Duration::from_secs(1));
            }
            Err(source) => {
                return Err(LockError::Io {
                    file: file.to_path_buf(),
                    source,
                });
            }
        }
    }
    let (stop, stopped) = bounded::<()>(0);
    let touched = dir.clone();
    let keeper = std::thread::Builder::new()
        .name("auth-lock".into())
        .spawn(move || {
            // Ends when the guard drops its sender.
            while let Err(crossbeam_channel::RecvTimeoutError::Timeout) =
                stopped.recv_timeout(TOUCH_INTERVAL)
            {
                touch(&touched);
            }
        })
        .ok();
    Ok(AuthLock {
        dir,
        stop: Some(stop),
        keeper,
    })
}

fn is_stale(dir: &Path, stale: Duration) -> bool {
    let modified = fs::metadata(dir).and_then(|m| m.modified());
    match modified {
        Ok(modified) => SystemTime::now()
            .duration_since(modified)
            .is_ok_and(|age| age > stale),
        // Gone meanwhile: not stale, just try again.
        Err(_) => false,
    }
}

fn touch(dir: &Path) {
    let now = libc::timespec {
        tv_sec: 0,
        tv_nsec: libc::UTIME_NOW,
    };
    let Ok(path) = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()) else {
        return;
    };
    let times = [now, now];
    // SAFETY: a valid NUL-terminated path and two timespecs, as utimensat(2) expects.
    unsafe {
        libc::utimensat(libc::AT_FDCWD, path.as_ptr(), times.as_ptr(), 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp(label: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("pi-rs-lock-{label}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn the_lock_is_a_directory_others_wait_for() {
        let dir = temp("wait");
        let file = dir.join("auth.json");
        let held = lock(&file, &CancelFlag::default()).unwrap();
        assert!(dir.join("auth.json.lock").is_dir());
        let err = lock_with(
            &file,
            Duration::from_millis(200),
            STALE,
            &CancelFlag::default(),
        )
        .err()
        .unwrap()
        .to_string();
        assert!(err.contains("locked by another process"), "{err}");
        drop(held);
        assert!(!dir.join("auth.json.lock").exists());
        let again = lock_with(
            &file,
            Duration::from_millis(200),
            STALE,
            &CancelFlag::default(),
        );
        assert!(again.is_ok());
        drop(again);
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_abandoned_lock_is_taken_over() {
        let dir = temp("stale");
        let file = dir.join("auth.json");
        fs::create_dir(lock_dir(&file)).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let lock = lock_with(
            &file,
            Duration::from_millis(500),
            Duration::from_millis(10),
            &CancelFlag::default(),
        );
        assert!(lock.is_ok());
        drop(lock);
        let _ = fs::remove_dir_all(&dir);
    }
}
