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

const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct Header {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct Data {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Drops `DROPPED` on the calling thread. Async-signal-safe: syscalls on stack memory only.
pub fn drop_dangerous() -> io::Result<()> {
    for cap in DROPPED {
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
    let mut header = Header {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let empty = Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    };
    let mut data = [empty; 2];
    // SAFETY: header and two data words, as the v3 interface wants.
    if unsafe {
        libc::syscall(
            libc::SYS_capget,
            &mut header as *mut Header,
            data.as_mut_ptr(),
        )
    } != 0
    {
        return Err(io::Error::last_os_error());
    }
    for cap in DROPPED {
        let (word, bit) = ((cap / 32) as usize, 1u32 << (cap % 32));
        data[word].effective &= !bit;
        data[word].permitted &= !bit;
        data[word].inheritable &= !bit;
    }
    // SAFETY: as above; only ever lowers the sets.
    if unsafe { libc::syscall(libc::SYS_capset, &mut header as *mut Header, data.as_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
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
