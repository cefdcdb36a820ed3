//! Thread "signals": turns SIGTERM and SIGHUP into messages for the agent loop, so a signal ends
//! the process the same orderly way stdin EOF does (run aborted with its `agent_end`, children's
//! process groups killed, session synced), with exit code 128 + signal. The handler only writes
//! the signal number to a self-pipe (async-signal-safe); this thread reads the pipe.
//!
//! Also asks the kernel to signal us when the parent dies (PR_SET_PDEATHSIG), so an editor that
//! crashes does not leave pi-rs running. The kernel sends that signal when the parent *thread*
//! that spawned us exits, which a multi-threaded parent does without dying; so it is SIGUSR2,
//! and only counts (as a hang-up, exit 129) once `getppid()` shows the parent really is gone.
//!
//! How it ends: it blocks in `read` on the pipe for the life of the process and is never joined.

use std::sync::atomic::{AtomicI32, Ordering};

use crossbeam_channel::Sender;

static PIPE_WRITE_END: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(signal: libc::c_int) {
    let fd = PIPE_WRITE_END.load(Ordering::Relaxed);
    if fd >= 0 {
        let byte = signal as u8;
        // SAFETY: write(2) is async-signal-safe; the buffer is a local byte.
        unsafe {
            libc::write(fd, (&byte as *const u8).cast(), 1);
        }
    }
}

/// Installs the handlers and starts the thread; each caught signal's number is sent on `to_agent`.
pub fn spawn(to_agent: Sender<i32>) -> std::io::Result<()> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: fds is a valid two-element array; O_CLOEXEC keeps the pipe out of children.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let [read_end, write_end] = fds;
    PIPE_WRITE_END.store(write_end, Ordering::Relaxed);
    // SAFETY: getppid has no preconditions.
    let parent = unsafe { libc::getppid() };
    for signal in [libc::SIGTERM, libc::SIGHUP, libc::SIGUSR2] {
        // SAFETY: installing a handler that only performs an async-signal-safe write.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_signal as *const () as usize;
            action.sa_flags = libc::SA_RESTART;
            libc::sigemptyset(&mut action.sa_mask);
            if libc::sigaction(signal, &action, std::ptr::null_mut()) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    // SAFETY: prctl with PR_SET_PDEATHSIG and a valid signal number has no memory effects.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGUSR2);
    }
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut byte = 0u8;
            loop {
                // SAFETY: reading one byte into a local buffer from our own pipe.
                let n = unsafe { libc::read(read_end, (&mut byte as *mut u8).cast(), 1) };
                if n == 1 {
                    let mut signal = i32::from(byte);
                    if signal == libc::SIGUSR2 {
                        // SAFETY: getppid has no preconditions.
                        if unsafe { libc::getppid() } == parent {
                            continue; // only the spawning thread ended
                        }
                        signal = libc::SIGHUP;
                    }
                    if to_agent.send(signal).is_err() {
                        return;
                    }
                } else if n < 0
                    && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
                {
                    continue;
                } else {
                    return;
                }
            }
        })?;
    Ok(())
}
