"""Bounds a Python context puts on itself before any worker code runs.

Run inside the walls by the child (standard library only), so that what it
bounds is the context as a whole and not each process of it:

- no new process: a seccomp filter refuses ``fork``/``vfork``/``clone3`` and a
  ``clone`` without ``CLONE_THREAD``, so the context's address-space limit
  (one process) is its memory limit, and SysV shared memory, which no
  process limit counts, is refused too;
- at most :data:`MAX_TASKS` threads: ``RLIMIT_NPROC`` set from inside the
  context's own user namespace counts that namespace's tasks only (the kernel
  keeps the count per user namespace), so a thread bomb exhausts its own
  allowance, not the machine's PIDs, and other contexts of the same user are
  not counted against it;
- a few open files (:data:`MAX_FILES`): each pipe or socket holds kernel
  buffers outside every memory limit.

The wall itself sets ``RLIMIT_FSIZE`` to 0 (``_walls``), so no file, tmpfs
page or ``memfd`` can hold a byte either.
"""

from __future__ import annotations

import ctypes
import platform
import resource
import struct

MAX_TASKS = 32  # threads of the context, the reaper of its namespace included
MAX_FILES = 64

# seccomp_data: nr at 0, arch at 4, args[0] (low word on little-endian) at 16.
_LD_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW, _KILL = 0x7FFF0000, 0x80000000
_EPERM, _ENOSYS = 0x00050000 | 1, 0x00050000 | 38
_CLONE_THREAD = 0x00010000
_X32 = 0x40000000
# arch token, then syscall numbers: fork, vfork (-1: none), clone, clone3, shmget
_ARCHES = {
    "x86_64": (0xC000003E, 57, 58, 56, 435, 29),
    "aarch64": (0xC00000B7, -1, -1, 220, 435, 194),
}


class _Filter(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint32)]


class _Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Filter))]


def _program(machine: str) -> list[tuple[int, int, int, int]]:
    arch, fork, vfork, clone, clone3, shmget = _ARCHES[machine]
    refuse = [n for n in (fork, vfork, shmget) if n >= 0]
    # Jumps count instructions to skip; the tail is: [EPERM, ENOSYS, clone check (3), ALLOW].
    prog = [(_LD_ABS, 0, 0, 4), (_JEQ, 1, 0, arch), (_RET, 0, 0, _KILL), (_LD_ABS, 0, 0, 0)]
    prog.append((_JGE, 0, 1, _X32))  # the x32 ABI has numbers of its own: none are allowed
    prog.append((_RET, 0, 0, _KILL))
    checks = [(n, "eperm") for n in refuse] + [(clone3, "enosys"), (clone, "clone")]
    for i, (nr, target) in enumerate(checks):
        left = len(checks) - i - 1  # checks after this one
        skip = left + 1 + {"eperm": 0, "enosys": 1, "clone": 2}[target]  # +1: the ALLOW after the checks
        prog.append((_JEQ, skip, 0, nr))
    prog.append((_RET, 0, 0, _ALLOW))
    prog.append((_RET, 0, 0, _EPERM))
    prog.append((_RET, 0, 0, _ENOSYS))  # glibc then falls back to clone, which is checked
    prog += [(_LD_ABS, 0, 0, 16), (_JSET, 0, 1, _CLONE_THREAD), (_RET, 0, 0, _ALLOW), (_RET, 0, 0, _EPERM)]
    return prog


def forbid_new_processes() -> bool:
    """Install the filter; False where this machine's architecture has no table here."""
    machine = platform.machine()
    if machine not in _ARCHES or struct.pack("=H", 1) != b"\x01\x00":
        return False
    prog = _program(machine)
    filters = (_Filter * len(prog))(*[_Filter(*ins) for ins in prog])
    fprog = _Prog(len(prog), filters)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(38, 1, None, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS: required to filter unprivileged
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS failed")
    if libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "seccomp filter refused")
    return True


def in_own_user_namespace() -> bool:
    """Whether this process runs in a user namespace of its own (the walls give one)."""
    try:
        with open("/proc/self/uid_map") as f:
            return f.read().split() != ["0", "0", "4294967295"]
    except OSError:
        return False


def confine() -> None:
    """All of the above, for the rest of this process's life (its limits only go down)."""
    forbid_new_processes()
    if in_own_user_namespace():  # outside one, the count would be the whole user's, on the machine
        resource.setrlimit(resource.RLIMIT_NPROC, (MAX_TASKS, MAX_TASKS))
    resource.setrlimit(resource.RLIMIT_NOFILE, (MAX_FILES, MAX_FILES))
