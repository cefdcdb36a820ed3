//! Child processes pi-rs starts (shells, ripgrep/fd, extensions, MCP servers, config `!command`s):
//! the one home for starting them in their own session and process group (`isolate`), killing
//! that group, finding programs on PATH and streaming a child's stdout line by line.
//!
//! Why groups: a child's own children (a shell's pipeline, a server's workers) join its group, so
//! one `killpg` reaches everything it started and nothing outlives its run. A group is killed
//! only while its leader is unreaped (a zombie keeps its pid, and so the group id, reserved), so
//! the kill cannot hit a stranger that reused the number.
//!
//! Why sessions: a child in pi-rs's session shares its controlling terminal, so a model's shell
//! could `TIOCSTI` a command into the user's shell through `/dev/tty` (bubblewrap's
//! `--new-session` closes the same hole). Every child leads a new session (`setsid`, which also
//! makes it the leader of a new process group): no controlling terminal, and a terminal it opens
//! by name stays someone else's. Children pi-rs starts for the model or the repository (tools,
//! MCP servers, extensions) of a root pi-rs also lose CAP_SYS_PTRACE, CAP_PERFMON (so pi-rs's
//! non-dumpable mark holds: no `/proc/<pi-rs>/fd/1`, `environ`, `mem`) and CAP_SYS_ADMIN (the
//! same, plus `TIOCSTI` and `TIOCSCTTY`-steal on any terminal), from the bounding set as well, so
//! no program they execute gets them back.

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

/// Set when the agent abandons a run (a tool, a `bash` command); children and line readers
/// watching it stop.
#[derive(Clone, Debug, Default)]
pub struct CancelFlag(Arc<AtomicBool>);

impl CancelFlag {
    pub fn cancel(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Who a child runs for, which decides what it keeps of a root pi-rs's privileges.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// The client's own command (the RPC `bash`, typed by the user): a new session only.
    Client,
    /// A tool call, an MCP server, an extension, a config command: a new session, and without
    /// `UNTRUSTED_CAPS`.
    Agent,
}

/// What a child started for the model loses (numbers from linux/capability.h): CAP_SYS_PTRACE
/// (19), CAP_SYS_ADMIN (21) and CAP_PERFMON (38). Each of the three alone lets a root process
/// read a non-dumpable process's `/proc/<pid>/environ` (tried on Linux 6.18); CAP_SYS_ADMIN also
/// allows `TIOCSTI` into any terminal.
pub const UNTRUSTED_CAPS: [u32; 3] = [19, 21, 38];

/// Makes `command`'s child lead a new session and process group (group id = its pid) and, for
/// `Origin::Agent`, drop `UNTRUSTED_CAPS`, between fork and exec. Register it after the
/// sandbox's `pre_exec` hook (which mounts first, while root still has CAP_SYS_ADMIN, and drops
/// these capabilities itself), and never combine it with `process_group`.
pub fn isolate(command: &mut Command, origin: Origin) {
    // SAFETY: setsid, prctl and capset only, on stack memory (async-signal-safe).
    unsafe {
        command.pre_exec(move || {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            if origin == Origin::Agent {
                drop_capabilities(&UNTRUSTED_CAPS)?;
            }
            Ok(())
        });
    }
}

const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Drops `caps` on the calling thread: from the bounding set (needs CAP_SETPCAP, so skipped for
/// a normal user, who has nothing to drop), the effective, permitted and inheritable sets; the
/// ambient set is cleared. Async-signal-safe: syscalls on stack memory only.
pub fn drop_capabilities(caps: &[u32]) -> std::io::Result<()> {
    for &cap in caps {
        // SAFETY: prctl on the calling thread. EINVAL (a capability this kernel does not know)
        // and EPERM (no CAP_SETPCAP: not root) leave nothing to drop.
        unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
    }
    // SAFETY: clears the ambient set of the calling thread; fails harmlessly on old kernels.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        )
    };
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let empty = CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    };
    let mut data = [empty; 2];
    // SAFETY: header and two data words, as the v3 interface wants.
    if unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut header as *mut CapHeader,
            data.as_mut_ptr(),
        )
    } != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    for &cap in caps {
        let (word, bit) = ((cap / 32) as usize, 1u32 << (cap % 32));
        data[word].effective &= !bit;
        data[word].permitted &= !bit;
        data[word].inheritable &= !bit;
    }
    // SAFETY: as above; only ever lowers the sets.
    if unsafe {
        libc::syscall(
            libc::SYS_capset,
            &mut header as *mut CapHeader,
            data.as_ptr(),
        )
    } != 0
    {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Whether the child has exited, leaving it unreaped (a zombie keeps its pid and group id
/// reserved, so the later group kill cannot hit a stranger).
pub fn has_exited_without_reaping(pid: u32) -> bool {
    // SAFETY: waitid writes only into the zeroed siginfo we own.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let result = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        result == 0 && info.si_pid() != 0
    }
}

/// SIGKILL to every process of the group `pgid`. An empty group is left alone: every group here
/// is made by `isolate` (the leader's setsid ran before `spawn` returned), so a failing group kill
/// means nobody is left in it, and the leader's pid alone — once reaped, free for any process on
/// the machine to reuse — is not signalled instead.
pub fn kill_group(pgid: i32) {
    if pgid <= 0 {
        return;
    }
    // SAFETY: a plain syscall on a group we created; an already empty group just fails.
    unsafe {
        libc::killpg(pgid, libc::SIGKILL);
    }
}

/// Sends `signal` to the group `pgid`.
pub fn signal_group(pgid: i32, signal: i32) {
    if pgid <= 0 {
        return;
    }
    // SAFETY: kill(2) with a negative pid signals the process group we created.
    unsafe {
        libc::kill(-pgid, signal);
    }
}

/// Whether any process of the group `pgid` still exists.
pub fn group_alive(pgid: i32) -> bool {
    // SAFETY: signal 0 only checks whether any process of the group exists.
    pgid > 0 && unsafe { libc::kill(-pgid, 0) } == 0
}

/// The process groups of one kind of child still running, for a kill-all at process exit.
pub struct LiveGroups(OnceLock<Mutex<HashSet<i32>>>);

impl LiveGroups {
    pub const fn new() -> LiveGroups {
        LiveGroups(OnceLock::new())
    }

    fn set(&self) -> MutexGuard<'_, HashSet<i32>> {
        self.0
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    pub fn insert(&self, pgid: i32) {
        self.set().insert(pgid);
    }

    pub fn remove(&self, pgid: i32) {
        self.set().remove(&pgid);
    }

    pub fn is_empty(&self) -> bool {
        self.set().is_empty()
    }

    /// SIGKILLs every group still listed and empties the list (pi-rs is exiting; a group id is
    /// never signalled twice).
    pub fn kill_all(&self) {
        for pgid in self.set().drain() {
            kill_group(pgid);
        }
    }
}

/// A child in its own session and process group (`Origin::Agent`). Dropping it kills the group and reaps the child, unless
/// `wait`/`try_wait` already reaped it.
pub struct GroupChild {
    child: Child,
    reaped: bool,
}

impl GroupChild {
    /// Spawns `command` as the leader of a new session and process group (see `isolate`).
    pub fn spawn(command: &mut Command) -> std::io::Result<GroupChild> {
        isolate(command, Origin::Agent);
        let child = command.spawn()?;
        Ok(GroupChild {
            child,
            reaped: false,
        })
    }

    /// The group id (the leader's pid).
    pub fn pgid(&self) -> i32 {
        self.child.id() as i32
    }

    /// The child's pipes (`stdin`, `stdout`, `stderr`) to take.
    pub fn pipes(&mut self) -> &mut Child {
        &mut self.child
    }

    /// Whether the leader has exited, leaving it unreaped: while it is a zombie its group id
    /// stays reserved, so a group kill after this cannot hit a stranger that reused the id.
    pub fn has_exited(&self) -> bool {
        !self.reaped && has_exited_without_reaping(self.child.id())
    }

    pub fn try_wait(&mut self) -> std::io::Result<Option<ExitStatus>> {
        let status = self.child.try_wait()?;
        self.reaped |= status.is_some();
        Ok(status)
    }

    pub fn wait(&mut self) -> std::io::Result<ExitStatus> {
        let status = self.child.wait();
        self.reaped = true;
        status
    }

    /// Kills the whole group (while the leader is unreaped) and reaps the leader.
    pub fn kill(&mut self) {
        if !self.reaped {
            kill_group(self.pgid());
            let _ = self.wait();
        }
    }
}

impl Drop for GroupChild {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Whether `path` is a file with an execute bit.
pub fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// First executable file called `name` in PATH.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| is_executable(candidate))
}

/// How a streamed child run ended.
pub enum LinesEnd {
    /// Exit code (None = killed by a signal) and the first 64 KB of stderr.
    Exited(Option<i32>, String),
    /// `on_line` asked to stop; the child was killed.
    Stopped,
    /// The cancel flag was raised; the child was killed.
    Aborted,
}

/// Runs `command` (stdin null), handing each stdout line (without its newline) to `on_line`
/// until it returns false, the child ends, or `cancel` is raised.
pub fn run_lines(
    command: &mut Command,
    cancel: &CancelFlag,
    on_line: &mut dyn FnMut(&str) -> bool,
) -> std::io::Result<LinesEnd> {
    let mut child = GroupChild::spawn(
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped()),
    )?;
    let stdout = child.pipes().stdout.take();
    let stderr = child.pipes().stderr.take();
    let (line_tx, line_rx) = crossbeam_channel::bounded::<String>(256);
    let _ = std::thread::Builder::new()
        .name("tool-stdout".to_string())
        .spawn(move || {
            let Some(stdout) = stdout else { return };
            let mut reader = BufReader::new(stdout);
            let mut buffer = Vec::new();
            loop {
                buffer.clear();
                match reader.read_until(b'\n', &mut buffer) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        if buffer.last() == Some(&b'\n') {
                            buffer.pop();
                        }
                        if line_tx
                            .send(String::from_utf8_lossy(&buffer).into_owned())
                            .is_err()
                        {
                            break;
                        }
                    }
                }
            }
        });
    let stderr_thread = std::thread::Builder::new()
        .name("tool-stderr".to_string())
        .spawn(move || {
            let mut collected = Vec::new();
            if let Some(stderr) = stderr {
                let _ = stderr.take(64 * 1024).read_to_end(&mut collected);
            }
            String::from_utf8_lossy(&collected).into_owned()
        });
    let mut end = None;
    loop {
        if cancel.is_cancelled() {
            end = Some(LinesEnd::Aborted);
            break;
        }
        match line_rx.recv_timeout(Duration::from_millis(20)) {
            Ok(line) => {
                if !on_line(&line) {
                    end = Some(LinesEnd::Stopped);
                    break;
                }
            }
            Err(crossbeam_channel::RecvTimeoutError::Timeout) => {}
            Err(crossbeam_channel::RecvTimeoutError::Disconnected) => break,
        }
    }
    if end.is_some() {
        child.kill();
    }
    drop(line_rx);
    let status = child.wait()?;
    let stderr_text = stderr_thread
        .ok()
        .and_then(|t| t.join().ok())
        .unwrap_or_default();
    Ok(end.unwrap_or(LinesEnd::Exited(status.code(), stderr_text)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alive(pid: i32) -> bool {
        // SAFETY: signal 0 only checks that the process exists.
        unsafe { libc::kill(pid, 0) == 0 }
    }

    #[test]
    fn dropping_a_group_child_kills_what_it_started_and_reaps_it() {
        let mut child = GroupChild::spawn(
            Command::new("sh")
                .arg("-c")
                .arg("sleep 30 & echo $!; wait")
                .stdout(Stdio::piped()),
        )
        .unwrap();
        let mut line = String::new();
        BufReader::new(child.pipes().stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let grandchild: i32 = line.trim().parse().unwrap();
        let (leader, pgid) = (child.pipes().id() as i32, child.pgid());
        assert_eq!(leader, pgid, "the child leads its own group");
        assert!(alive(grandchild));
        drop(child);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while group_alive(pgid) && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!group_alive(pgid), "the whole group is gone");
        assert!(!alive(leader), "the leader was reaped (no zombie)");
    }

    #[test]
    fn run_lines_streams_lines_and_stops_on_request() {
        let mut seen = Vec::new();
        let end = run_lines(
            Command::new("sh")
                .arg("-c")
                .arg("printf 'a\\nb\\nc\\n'; sleep 30"),
            &CancelFlag::default(),
            &mut |line| {
                seen.push(line.to_string());
                seen.len() < 2
            },
        )
        .unwrap();
        assert!(matches!(end, LinesEnd::Stopped));
        assert_eq!(seen, ["a", "b"]);
    }

    #[test]
    fn programs_are_found_on_path_only_when_executable() {
        assert!(find_on_path("sh").is_some_and(|p| is_executable(&p)));
        assert!(find_on_path("no-such-program-pi-rs").is_none());
        let dir = crate::test_support::temp_dir("child");
        let file = dir.join("plain");
        std::fs::write(&file, "").unwrap();
        assert!(!is_executable(&file), "no execute bit");
        assert!(!is_executable(&dir), "a directory is no program");
        std::fs::remove_dir_all(dir).unwrap();
    }
}
