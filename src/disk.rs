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

use std::fs::File;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;

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
