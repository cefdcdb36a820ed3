//! Threads "disk-writer" and "disk-sync": the agent thread never waits on the disk.
//!
//! `write` queues an ordered write (session appends and creations, settings.json) for
//! "disk-writer"; `sync` queues durability-only work (the fsync of a session file at the end of a
//! run) for "disk-sync", so that fsync never holds up the appends behind it. Jobs run in the order queued on
//! each thread; a job reports its own failure (stderr) and leaves what a retry needs where its
//! owner looks next (see `session::SessionLog::persist`).
//!
//! Acknowledgement stays as before the writer existed: `wait_for_writes`, called by the stdout
//! writer before each record, holds a record until every write queued before it has been done
//! (written or failed and reported), so a client never sees `message_end` for an entry that is not
//! in the file yet. Records do not wait for fsyncs (they never did: the run's fsync followed
//! `agent_end`).
//!
//! Test hook: `PI_TEST_FSYNC_DELAY_MS=<n>` makes every fsync pi-rs issues sleep n ms first (a slow
//! disk for `cargo bench`'s `disk` scenario).
//!
//! How it ends: both threads start on first use and live as long as the process; `flush` (at
//! shutdown, bounded) waits until everything queued so far on both is done.
//!
//! Also here: [`replace_file`], the one way pi-rs replaces a whole file (the write and edit tools,
//! settings.json).

use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use crossbeam_channel::Sender;

type Job = Box<dyn FnOnce() + Send>;

struct Disk {
    writes: Sender<Job>,
    syncs: Sender<Job>,
    /// Writes queued so far (the writer numbers them 1, 2, …).
    queued: AtomicU64,
    /// Writes done so far.
    done: Mutex<u64>,
    changed: Condvar,
}

/// Started on first use; `None` until then (a process that never writes never waits).
static DISK: OnceLock<Disk> = OnceLock::new();

fn disk() -> &'static Disk {
    DISK.get_or_init(|| {
        let (writes, write_jobs) = crossbeam_channel::unbounded::<Job>();
        let (syncs, sync_jobs) = crossbeam_channel::unbounded::<Job>();
        let spawn = |name: &str, jobs: crossbeam_channel::Receiver<Job>, counted: bool| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(move || {
                    for job in jobs {
                        job();
                        if counted {
                            let disk = disk();
                            *lock(&disk.done) += 1;
                            disk.changed.notify_all();
                        }
                    }
                })
                .map(drop)
        };
        // Without the threads there is no way to write at all; say so once, loudly.
        if let Err(e) = spawn("disk-writer", write_jobs, true)
            .and_then(|()| spawn("disk-sync", sync_jobs, false))
        {
            log::error!("cannot start the disk threads: {e}");
        }
        Disk {
            writes,
            syncs,
            queued: AtomicU64::new(0),
            done: Mutex::new(0),
            changed: Condvar::new(),
        }
    })
}

fn lock(done: &Mutex<u64>) -> MutexGuard<'_, u64> {
    done.lock().unwrap_or_else(|p| p.into_inner())
}

/// Queues an ordered write; records sent to stdout after this call wait until it is done.
pub fn write(job: impl FnOnce() + Send + 'static) {
    let disk = disk();
    disk.queued.fetch_add(1, Ordering::SeqCst);
    if let Err(e) = disk.writes.send(Box::new(job)) {
        // The thread is gone (it could not start): do the write here rather than lose it.
        (e.into_inner())();
        *lock(&disk.done) += 1;
    }
}

/// Queues durability-only work (fsync); nothing waits for it.
pub fn sync(job: impl FnOnce() + Send + 'static) {
    if let Err(e) = disk().syncs.send(Box::new(job)) {
        (e.into_inner())();
    }
}

/// Blocks until every write queued before this call is done. Cheap when none is pending.
pub fn wait_for_writes() {
    let Some(disk) = DISK.get() else {
        return;
    };
    let target = disk.queued.load(Ordering::SeqCst);
    let mut done = lock(&disk.done);
    while *done < target {
        done = disk.changed.wait(done).unwrap_or_else(|p| p.into_inner());
    }
}

/// Waits (at most `bound`) until everything queued so far on both threads is done. False when
/// the bound passed first.
pub fn flush(bound: Duration) -> bool {
    if DISK.get().is_none() {
        return true;
    }
    let (tx, rx) = crossbeam_channel::bounded::<()>(1);
    // The marker passes the writer first, then the sync thread: both queues are drained.
    write(move || sync(move || _ = tx.send(())));
    rx.recv_timeout(bound).is_ok()
}

/// Creates `dir` and its missing parents as private folders (0700, as OpenSSH keeps `~/.ssh`):
/// folders that exist already keep their mode.
pub fn create_private_dir_all(dir: &std::path::Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// fsync, with the bench's slow-disk hook.
pub fn fsync(file: &File) -> std::io::Result<()> {
    static DELAY: OnceLock<Option<Duration>> = OnceLock::new();
    let delay = DELAY.get_or_init(|| {
        std::env::var("PI_TEST_FSYNC_DELAY_MS")
            .ok()
            .and_then(|ms| ms.parse().ok())
            .map(Duration::from_millis)
    });
    if let Some(delay) = delay {
        std::thread::sleep(*delay);
    }
    file.sync_all()
}

/// Replaces the file at `path` with `bytes` so that a reader sees the old contents or the new
/// ones, never a part: a temp file in the same folder, written and fsynced, renamed over it,
/// keeping the old file's mode and owner. A symlink is written through (its target is replaced,
/// the link stays; a dangling link's target is created).
///
/// Written in place instead (as a plain write would, not atomically) when a rename would change
/// what the path is: not a regular file (`/dev/null`), several hard links (the others would keep
/// the old contents), an owner pi-rs cannot give the new file, or a folder pi-rs cannot create
/// the temp file in (a writable file in a read-only folder). An existing file that cannot be
/// opened for writing gives the error a plain write would (`EACCES`, `EISDIR`, `ETXTBSY`).
pub fn replace_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let target = write_target(path);
    let existing = fs::metadata(&target).ok();
    if let Some(meta) = &existing {
        if !meta.is_file() || meta.nlink() > 1 {
            return fs::write(&target, bytes);
        }
        fs::OpenOptions::new().write(true).open(&target)?;
    }
    match write_through_temp(&target, bytes, existing.as_ref()) {
        Ok(true) => Ok(()),
        Ok(false) => fs::write(&target, bytes),
        Err(e) => Err(e),
    }
}

/// `path`, or the file a symlink at `path` leads to (absolute against the link's folder when it
/// dangles).
fn write_target(path: &Path) -> PathBuf {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            fs::canonicalize(path).unwrap_or_else(|_| match fs::read_link(path) {
                Ok(target) => path.parent().unwrap_or(Path::new("/")).join(target),
                Err(_) => path.to_path_buf(),
            })
        }
        _ => path.to_path_buf(),
    }
}

/// The temp-file-and-rename write; `Ok(false)` when it cannot be done that way (no temp file in
/// the folder, the owner cannot be kept) and nothing was changed.
fn write_through_temp(
    target: &Path,
    bytes: &[u8],
    existing: Option<&fs::Metadata>,
) -> std::io::Result<bool> {
    let dir = match target.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let temp = dir.join(format!(
        ".{name}.{}-{}.tmp",
        std::process::id(),
        crate::ids::random_hex(4)
    ));
    let Ok(mut file) = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&temp)
    else {
        return Ok(false);
    };
    let kept = existing.is_none_or(|old| {
        let ours = file.metadata().ok();
        let same_owner = ours.is_some_and(|m| (m.uid(), m.gid()) == (old.uid(), old.gid()));
        let owner_kept = same_owner
            || std::os::unix::fs::fchown(&file, Some(old.uid()), Some(old.gid())).is_ok();
        let mode = fs::Permissions::from_mode(old.mode() & 0o7777);
        owner_kept && file.set_permissions(mode).is_ok()
    });
    if !kept {
        drop(file);
        let _ = fs::remove_file(&temp);
        return Ok(false);
    }
    let written = file
        .write_all(bytes)
        .and_then(|()| fsync(&file))
        .and_then(|()| fs::rename(&temp, target));
    if let Err(e) = written {
        let _ = fs::remove_file(&temp);
        return Err(e);
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

    #[test]
    fn replace_file_renames_keeps_the_mode_and_follows_links() {
        use std::os::unix::fs::MetadataExt;
        let dir = crate::test_support::temp_dir("replace-file");
        let file = dir.join("a.txt");
        replace_file(&file, b"new file").unwrap();
        assert_eq!(fs::read(&file).unwrap(), b"new file");
        fs::set_permissions(&file, fs::Permissions::from_mode(0o604)).unwrap();
        let inode = fs::metadata(&file).unwrap().ino();
        replace_file(&file, b"second").unwrap();
        let meta = fs::metadata(&file).unwrap();
        assert_ne!(meta.ino(), inode, "a new file was renamed over it");
        assert_eq!(meta.mode() & 0o7777, 0o604);
        assert_eq!(fs::read(&file).unwrap(), b"second");

        std::os::unix::fs::symlink("made.txt", dir.join("dangling")).unwrap();
        replace_file(&dir.join("dangling"), b"via link").unwrap();
        assert_eq!(fs::read(dir.join("made.txt")).unwrap(), b"via link");
        assert!(
            fs::symlink_metadata(dir.join("dangling"))
                .unwrap()
                .file_type()
                .is_symlink()
        );

        fs::hard_link(&file, dir.join("b.txt")).unwrap();
        let inode = fs::metadata(&file).unwrap().ino();
        replace_file(&file, b"both names").unwrap();
        assert_eq!(fs::metadata(&file).unwrap().ino(), inode, "in place");
        assert_eq!(fs::read(dir.join("b.txt")).unwrap(), b"both names");

        assert!(replace_file(&dir, b"x").is_err(), "a folder is an error");
        let names: Vec<_> = fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names.len(), 4, "no temp file left: {names:?}");
        let _ = fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_record_waits_for_the_writes_queued_before_it_but_not_for_syncs() {
        let written = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&written);
        write(move || {
            std::thread::sleep(Duration::from_millis(50));
            flag.store(true, Ordering::SeqCst);
        });
        wait_for_writes();
        assert!(written.load(Ordering::SeqCst), "the write was done first");

        let (release, held) = crossbeam_channel::bounded::<()>(0);
        sync(move || _ = held.recv_timeout(Duration::from_secs(10)));
        // A sync still running does not hold records (or later writes) back.
        let (done_tx, done_rx) = crossbeam_channel::bounded(1);
        write(move || _ = done_tx.send(()));
        wait_for_writes();
        assert!(done_rx.try_recv().is_ok());
        drop(release);
        assert!(flush(Duration::from_secs(10)));
    }
}
