//! The seccomp layer for `network: false`: what Landlock cannot say. Landlock (ABI 4+) only
//! knows TCP connect/bind; this filter refuses creating any socket that is not AF_UNIX (UDP, raw,
//! netlink, packet, …; on kernels below ABI 4 TCP too) and `io_uring_setup` (io_uring can open
//! sockets without the socket syscall). Refused calls fail with EACCES; everything else runs.
//!
//! Built for x86_64 (plus its i386 and x32 entry points) and aarch64 (plus arm32); on other
//! architectures `network_filter` is `None` and the layer is reported as unavailable.

use std::io;

// Classic BPF opcodes (linux/filter.h, linux/bpf_common.h).
/// BPF_LD | BPF_W | BPF_ABS (the first two are 0).
const BPF_LD_W_ABS: u16 = 0x20;
const BPF_JMP_JEQ_K: u16 = 0x05 | 0x10;
const BPF_JMP_JGE_K: u16 = 0x05 | 0x30;
const BPF_RET_K: u16 = 0x06;

const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;

// struct seccomp_data offsets.
const OFFSET_NR: u32 = 0;
const OFFSET_ARCH: u32 = 4;
/// Low 32 bits of args[0] (little-endian): the socket domain.
const OFFSET_ARG0_LOW: u32 = 16;

/// The syscall numbers the filter looks at, for one architecture.
struct Arch {
    audit_arch: u32,
    socket: u32,
    io_uring_setup: u32,
    /// Multiplexed socket call (i386 `socketcall`), refused outright.
    socketcall: Option<u32>,
    /// Numbers at or above this belong to another ABI on the same arch (x86 x32): refused.
    foreign_abi_base: Option<u32>,
}

#[cfg(target_arch = "x86_64")]
const NATIVE: Arch = Arch {
    audit_arch: 0xC000_003E,
    socket: 41,
    io_uring_setup: 425,
    socketcall: None,
    foreign_abi_base: Some(0x4000_0000),
};
#[cfg(target_arch = "x86_64")]
const COMPAT: Arch = Arch {
    audit_arch: 0x4000_0003,
    socket: 359,
    io_uring_setup: 425,
    socketcall: Some(102),
    foreign_abi_base: None,
};
#[cfg(target_arch = "aarch64")]
const NATIVE: Arch = Arch {
    audit_arch: 0xC000_00B7,
    socket: 198,
    io_uring_setup: 425,
    socketcall: None,
    foreign_abi_base: None,
};
#[cfg(target_arch = "aarch64")]
const COMPAT: Arch = Arch {
    audit_arch: 0x4000_0028,
    socket: 281,
    io_uring_setup: 425,
    socketcall: None,
    foreign_abi_base: None,
};

/// A jump target in the program being assembled.
#[derive(Clone, Copy, PartialEq)]
enum Label {
    Next,
    Allow,
    Deny,
    Compat,
    SocketDomain,
}

enum Op {
    Load(u32),
    JumpIfEqual(u32, Label, Label),
    JumpIfAtLeast(u32, Label, Label),
    Return(u32),
    Mark(Label),
}

/// An installed-ready filter program (owned instructions; the pointer is taken at install).
pub struct Filter {
    program: Vec<libc::sock_filter>,
}

/// The `network: false` filter for this architecture.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
pub fn network_filter() -> Option<Filter> {
    Some(Filter {
        program: assemble(&network_ops()),
    })
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub fn network_filter() -> Option<Filter> {
    None
}

#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn network_ops() -> Vec<Op> {
    let deny = SECCOMP_RET_ERRNO | libc::EACCES as u32;
    let mut ops = vec![
        Op::Load(OFFSET_ARCH),
        Op::JumpIfEqual(NATIVE.audit_arch, Label::Next, Label::Compat),
        Op::Load(OFFSET_NR),
    ];
    if let Some(base) = NATIVE.foreign_abi_base {
        ops.push(Op::JumpIfAtLeast(base, Label::Deny, Label::Next));
    }
    ops.extend([
        Op::JumpIfEqual(NATIVE.socket, Label::SocketDomain, Label::Next),
        Op::JumpIfEqual(NATIVE.io_uring_setup, Label::Deny, Label::Next),
        Op::Return(SECCOMP_RET_ALLOW),
        Op::Mark(Label::SocketDomain),
        Op::Load(OFFSET_ARG0_LOW),
        Op::JumpIfEqual(libc::AF_UNIX as u32, Label::Allow, Label::Deny),
        Op::Mark(Label::Compat),
        // 32-bit programs on a 64-bit kernel: no socket of any kind (their argument layout is
        // not worth a second decoder).
        Op::Load(OFFSET_NR),
        Op::JumpIfEqual(COMPAT.socket, Label::Deny, Label::Next),
        Op::JumpIfEqual(COMPAT.io_uring_setup, Label::Deny, Label::Next),
    ]);
    if let Some(socketcall) = COMPAT.socketcall {
        ops.push(Op::JumpIfEqual(socketcall, Label::Deny, Label::Next));
    }
    ops.extend([
        Op::Mark(Label::Allow),
        Op::Return(SECCOMP_RET_ALLOW),
        Op::Mark(Label::Deny),
        Op::Return(deny),
    ]);
    ops
}

/// Resolves labels into forward jump offsets (classic BPF only jumps forward).
fn assemble(ops: &[Op]) -> Vec<libc::sock_filter> {
    let mut positions = Vec::new();
    let mut index = 0u32;
    for op in ops {
        match op {
            Op::Mark(label) => positions.push((*label, index)),
            _ => index += 1,
        }
    }
    let target = |label: Label, at: u32| -> u8 {
        if label == Label::Next {
            return 0;
        }
        let position = positions
            .iter()
            .find(|(l, p)| *l == label && *p > at)
            .map(|(_, p)| *p)
            .expect("every jump has a label after it");
        u8::try_from(position - at - 1).expect("short program")
    };
    let mut program = Vec::new();
    for op in ops {
        let at = program.len() as u32;
        let instruction = match op {
            Op::Mark(_) => continue,
            Op::Load(offset) => (BPF_LD_W_ABS, 0, 0, *offset),
            Op::Return(value) => (BPF_RET_K, 0, 0, *value),
            Op::JumpIfEqual(k, yes, no) => (BPF_JMP_JEQ_K, target(*yes, at), target(*no, at), *k),
            Op::JumpIfAtLeast(k, yes, no) => (BPF_JMP_JGE_K, target(*yes, at), target(*no, at), *k),
        };
        program.push(libc::sock_filter {
            code: instruction.0,
            jt: instruction.1,
            jf: instruction.2,
            k: instruction.3,
        });
    }
    program
}

impl Filter {
    /// Installs the filter on the calling thread (no_new_privs must already be set).
    /// Async-signal-safe: no allocation, one prctl.
    pub fn install(&self) -> io::Result<()> {
        let program = libc::sock_fprog {
            len: self.program.len() as u16,
            filter: self.program.as_ptr() as *mut libc::sock_filter,
        };
        // SAFETY: `program` points at instructions that outlive the call; the kernel copies them.
        let result = unsafe {
            libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &program as *const libc::sock_fprog,
                0,
                0,
            )
        };
        if result != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Whether this kernel takes seccomp filters (CONFIG_SECCOMP_FILTER).
pub fn available() -> bool {
    // SAFETY: a query with no side effects.
    let mode = unsafe { libc::prctl(libc::PR_GET_SECCOMP, 0, 0, 0, 0) };
    mode >= 0 && network_filter().is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn jumps_land_on_their_labels() {
        let program = network_filter().unwrap().program;
        let last = program.len() - 1;
        // The last instruction denies, the one before allows.
        assert_eq!(program[last].code, BPF_RET_K);
        assert_eq!(program[last].k, SECCOMP_RET_ERRNO | libc::EACCES as u32);
        assert_eq!(program[last - 1].k, SECCOMP_RET_ALLOW);
        for (at, instruction) in program.iter().enumerate() {
            if instruction.code & 0x07 == 0x05 {
                assert!(at + 1 + (instruction.jt as usize) <= last);
                assert!(at + 1 + (instruction.jf as usize) <= last);
            }
        }
        // The x32 check jumps to the deny at the end.
        let x32 = program
            .iter()
            .position(|i| i.code == BPF_JMP_JGE_K)
            .unwrap();
        assert_eq!(x32 + 1 + program[x32].jt as usize, last);
    }

    #[test]
    fn a_filtered_thread_gets_no_inet_socket_but_keeps_unix_ones() {
        if !available() {
            eprintln!("SKIP: no seccomp filter support");
            return;
        }
        let filter = network_filter().unwrap();
        let (inet, unix) = std::thread::spawn(move || {
            // SAFETY: prctl on the calling thread only.
            assert_eq!(
                unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) },
                0
            );
            filter.install().unwrap();
            let inet = std::net::UdpSocket::bind("127.0.0.1:0").map_err(|e| e.raw_os_error());
            let unix = std::os::unix::net::UnixDatagram::unbound().map(|_| ());
            (inet.map(|_| ()), unix.map_err(|e| e.raw_os_error()))
        })
        .join()
        .unwrap();
        assert_eq!(inet, Err(Some(libc::EACCES)));
        assert_eq!(unix, Ok(()));
        // Other threads are untouched.
        assert!(std::net::UdpSocket::bind("127.0.0.1:0").is_ok());
    }
}
