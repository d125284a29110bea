"""The seccomp program the sandbox loads (``bwrap --seccomp FD``): a classic BPF filter, built here.

Checked in this order for every system call of the sandboxed process and its children:

1. the architecture: x86-64 or AArch64; any other ABI (i386 ``int 0x80`` calls on an x86-64
   kernel, for instance) kills the process, since the numbers below would mean other calls;
2. on x86-64, the x32 ABI (numbers with bit 30 set) is refused;
3. ``clone3`` gets ENOSYS (its flags sit in memory a filter cannot read; the C library falls back
   to ``clone``), ``clone`` with any ``CLONE_NEW*`` flag gets EPERM;
4. ``socket`` of any family but ``AF_UNIX`` gets EPERM (the box has no network anyway);
5. the calls in :data:`DENIED` get EPERM: namespaces (``setns``, ``unshare``), mounts, ``ptrace``
   and cross-process memory, kernel keys, modules, kexec, BPF, perf, io_uring, userfaultfd, file
   handles, clock and host settings, swap, reboot;
6. everything else is allowed.

Deliberately left out: an allow-list (the standard library needs a long and kernel-dependent
one; the namespaces and the unprivileged uid already hold what the deny-list does not name) and
architectures other than the two above (the sandbox refuses to start there).
"""

from __future__ import annotations

import errno
import platform
import struct

# seccomp_data: int nr; u32 arch; u64 instruction_pointer; u64 args[6] (little-endian hosts)
_NR, _ARCH, _ARG0 = 0, 4, 16

_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
_JEQ = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
_JGE = 0x35  # BPF_JMP | BPF_JGE | BPF_K
_JSET = 0x45  # BPF_JMP | BPF_JSET | BPF_K
_RET = 0x06  # BPF_RET | BPF_K

RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000

AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_AARCH64 = 0xC00000B7
X32_SYSCALL_BIT = 0x40000000

# CLONE_NEWTIME | NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
CLONE_NEW_FLAGS = 0x00000080 | 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 \
    | 0x10000000 | 0x20000000 | 0x40000000
AF_UNIX = 1

DENIED = (
    "setns", "unshare", "mount", "umount2", "pivot_root", "chroot", "fsopen", "fsconfig",
    "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr", "ptrace",
    "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd", "bpf", "perf_event_open",
    "keyctl", "add_key", "request_key", "kexec_load", "kexec_file_load", "init_module",
    "finit_module", "delete_module", "userfaultfd", "open_by_handle_at", "name_to_handle_at",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "swapon", "swapoff", "reboot",
    "syslog", "acct", "quotactl", "quotactl_fd", "lookup_dcookie", "vhangup", "settimeofday",
    "clock_settime", "clock_adjtime", "adjtimex", "sethostname", "setdomainname",
    "fanotify_init", "nfsservctl", "personality", "iopl", "ioperm", "uselib",
)
"""System calls refused with EPERM (those an architecture lacks are skipped)."""

# From the kernel's uapi headers (asm/unistd_64.h for x86-64, asm-generic/unistd.h for AArch64).
SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {
        "setns": 308, "unshare": 272, "mount": 165, "umount2": 166, "pivot_root": 155,
        "chroot": 161, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433,
        "move_mount": 429, "open_tree": 428, "mount_setattr": 442, "ptrace": 101,
        "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312, "pidfd_getfd": 438,
        "bpf": 321, "perf_event_open": 298, "keyctl": 250, "add_key": 248, "request_key": 249,
        "kexec_load": 246, "kexec_file_load": 320, "init_module": 175, "finit_module": 313,
        "delete_module": 176, "userfaultfd": 323, "open_by_handle_at": 304,
        "name_to_handle_at": 303, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "swapon": 167, "swapoff": 168, "reboot": 169, "syslog": 103,
        "acct": 163, "quotactl": 179, "quotactl_fd": 443, "lookup_dcookie": 212, "vhangup": 153,
        "settimeofday": 164, "clock_settime": 227, "clock_adjtime": 305, "adjtimex": 159,
        "sethostname": 170, "setdomainname": 171, "fanotify_init": 300, "nfsservctl": 180,
        "personality": 135, "iopl": 172, "ioperm": 173, "uselib": 134,
        "clone": 56, "clone3": 435, "socket": 41,
    },
    "aarch64": {
        "setns": 268, "unshare": 97, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51,
        "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "move_mount": 429,
        "open_tree": 428, "mount_setattr": 442, "ptrace": 117, "process_vm_readv": 270,
        "process_vm_writev": 271, "kcmp": 272, "pidfd_getfd": 438, "bpf": 280,
        "perf_event_open": 241, "keyctl": 219, "add_key": 217, "request_key": 218,
        "kexec_load": 104, "kexec_file_load": 294, "init_module": 105, "finit_module": 273,
        "delete_module": 106, "userfaultfd": 282, "open_by_handle_at": 265,
        "name_to_handle_at": 264, "io_uring_setup": 425, "io_uring_enter": 426,
        "io_uring_register": 427, "swapon": 224, "swapoff": 225, "reboot": 142, "syslog": 116,
        "acct": 89, "quotactl": 60, "quotactl_fd": 443, "lookup_dcookie": 18, "vhangup": 58,
        "settimeofday": 170, "clock_settime": 112, "clock_adjtime": 266, "adjtimex": 171,
        "sethostname": 161, "setdomainname": 162, "fanotify_init": 262, "nfsservctl": 42,
        "personality": 92, "clone": 220, "clone3": 435, "socket": 198,
    },
}
_AUDIT_ARCH = {"x86_64": AUDIT_ARCH_X86_64, "aarch64": AUDIT_ARCH_AARCH64}


class _Program:
    """A tiny assembler: instructions with symbolic jump targets, resolved by :meth:`build`."""

    def __init__(self) -> None:
        self.code: list[tuple[int, object, object, int]] = []
        self.labels: dict[str, int] = {}

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def op(self, code: int, k: int, jt: object = 0, jf: object = 0) -> None:
        self.code.append((code, jt, jf, k))

    def build(self) -> bytes:
        out = bytearray()
        for i, (code, jt, jf, k) in enumerate(self.code):
            offsets = []
            for target in (jt, jf):
                off = target if isinstance(target, int) else self.labels[target] - i - 1
                if not 0 <= off <= 255:
                    raise ValueError(f"BPF jump out of range at {i}: {target!r}")
                offsets.append(off)
            out += struct.pack("=HBBI", code, offsets[0], offsets[1], k)
        return bytes(out)


def filter_program() -> bytes:
    """The filter as ``struct sock_filter[]`` bytes (what ``bwrap --seccomp`` reads)."""
    p = _Program()
    p.op(_LD_W_ABS, _ARCH)
    for arch in SYSCALLS:
        p.op(_JEQ, _AUDIT_ARCH[arch], f"arch_{arch}", 0)
    p.op(_RET, RET_KILL_PROCESS)
    for arch, numbers in SYSCALLS.items():
        p.label(f"arch_{arch}")
        p.op(_LD_W_ABS, _NR)
        if arch == "x86_64":
            p.op(_JGE, X32_SYSCALL_BIT, "eperm", 0)
        p.op(_JEQ, numbers["clone3"], "enosys", 0)
        p.op(_JEQ, numbers["clone"], "clone", 0)
        p.op(_JEQ, numbers["socket"], "socket", 0)
        for name in DENIED:
            if name in numbers:
                p.op(_JEQ, numbers[name], "eperm", 0)
        p.op(_RET, RET_ALLOW)
    p.label("clone")  # flags are the first argument on both architectures
    p.op(_LD_W_ABS, _ARG0)
    p.op(_JSET, CLONE_NEW_FLAGS, "eperm", "allow")
    p.label("socket")
    p.op(_LD_W_ABS, _ARG0)
    p.op(_JEQ, AF_UNIX, "allow", "eperm")
    p.label("allow")
    p.op(_RET, RET_ALLOW)
    p.label("eperm")
    p.op(_RET, RET_ERRNO | errno.EPERM)
    p.label("enosys")
    p.op(_RET, RET_ERRNO | errno.ENOSYS)
    return p.build()


def supported() -> bool:
    """Whether this machine's architecture is one the filter knows."""
    return platform.machine() in SYSCALLS
