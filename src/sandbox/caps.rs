//! The capability layer: a confined thread or child gives up the capabilities that reach around
//! Landlock when pi-rs runs as root (loading kernel modules, raw I/O, mounting, ptrace, device
//! nodes, the network stack, the clock, …). Dropped from the bounding set (so no program executed
//! later gets them back) and from the effective, permitted and inheritable sets; the ambient set
//! is cleared. For a normal user this changes nothing (there is nothing to drop; the bounding-set
//! drop needs CAP_SETPCAP and is skipped without it).

use std::io;

/// The capabilities a sandboxed tool never needs (numbers from linux/capability.h).
const DROPPED: [u32; 18] = [
    2,  // CAP_DAC_READ_SEARCH: open_by_handle_at
    9,  // CAP_LINUX_IMMUTABLE
    12, // CAP_NET_ADMIN
    13, // CAP_NET_RAW
    16, // CAP_SYS_MODULE
    17, // CAP_SYS_RAWIO
    19, // CAP_SYS_PTRACE
    21, // CAP_SYS_ADMIN
    22, // CAP_SYS_BOOT
    25, // CAP_SYS_TIME
    27, // CAP_MKNOD
    30, // CAP_AUDIT_CONTROL
    32, // CAP_MAC_OVERRIDE
    33, // CAP_MAC_ADMIN
    34, // CAP_SYSLOG
    38, // CAP_PERFMON
    39, // CAP_BPF
    40, // CAP_CHECKPOINT_RESTORE
];

/// Drops `DROPPED` on the calling thread. Async-signal-safe: syscalls on stack memory only.
pub fn drop_dangerous() -> io::Result<()> {
    crate::child::drop_capabilities(&DROPPED)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status_hex(field: &str) -> u64 {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with(field)).unwrap();
        u64::from_str_radix(line[field.len()..].trim(), 16).unwrap()
    }

    #[test]
    fn a_thread_drops_the_dangerous_capabilities_and_keeps_the_rest() {
        let before = status_hex("CapEff:");
        let (effective, bounding) = std::thread::spawn(|| {
            drop_dangerous().unwrap();
            (status_hex("CapEff:"), status_hex("CapBnd:"))
        })
        .join()
        .unwrap();
        for cap in DROPPED {
            assert_eq!(effective & (1 << cap), 0, "cap {cap} still effective");
        }
        let kept: u64 = before & !DROPPED.iter().fold(0u64, |m, c| m | 1 << c);
        assert_eq!(effective, kept);
        if before & (1 << 8) != 0 {
            // Root (CAP_SETPCAP): the bounding set lost them too.
            assert_eq!(bounding & (1 << 16), 0);
        }
        // Other threads keep theirs.
        assert_eq!(status_hex("CapEff:"), before);
    }
}
