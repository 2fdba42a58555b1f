"""Confining a process: rlimits, new namespaces (a network of its loopback alone, a PID namespace of its
own), then no capability at all.

The zygote (zygote.py) confines each job's forked child with these before the job is read. Run as a script,
it confines itself and execs a command: the process backend probes which namespaces this machine permits
that way, with a trivial command. Only the standard library is imported, so the script runs under
`python -I -S`.

With a new PID namespace among the flags, the job runs as a forked child, pid 1 of that namespace, and the
process that made it waits and ends as it ended: when the job ends, the kernel kills everything it left
behind, and nothing in it can signal a process outside (the search, by pid), whatever session it starts.

Usage: python -I -S confine.py '<json spec>' COMMAND [ARG ...]
spec: {"rlimits": [[resource, soft, hard], ...], "unshare": flags}
"""

from __future__ import annotations

import ctypes
import fcntl
import json
import os
import resource
import signal
import socket
import struct
import sys

CLONE_NEWNET = 0x40000000
CLONE_NEWPID = 0x20000000
SIOCGIFFLAGS, SIOCSIFFLAGS, IFF_UP = 0x8913, 0x8914, 0x1
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_NO_NEW_PRIVS = 38
CAP_LAST = 63
"""Beyond the last capability the kernel knows, PR_CAPBSET_DROP fails harmlessly."""
LINUX_CAPABILITY_VERSION_3 = 0x20080522


def confine(rlimits: list[list[int]], flags: int) -> None:
    """Apply the rlimits, move into the new namespaces (with a PID namespace, return in its pid 1), then
    give up every capability."""
    for which, soft, hard in rlimits:
        resource.setrlimit(which, (soft, hard))
    if flags:
        unshare(flags)
    if flags & CLONE_NEWNET:
        loopback_up()
    if flags & CLONE_NEWPID:
        as_init()
    drop_capabilities()


def drop_capabilities() -> None:
    """Hold no capability, and gain none by exec (no new privileges, an empty bounding set): run as root, a
    job then cannot open the memory of a process that is not dumpable, nor raise a hard limit."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    for capability in range(CAP_LAST + 1):
        libc.prctl(PR_CAPBSET_DROP, capability, 0, 0, 0)  # fails where none is left to drop: then harmless
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    none = (ctypes.c_uint32 * 6)()  # effective, permitted, inheritable: twice 32 bits each
    if libc.capset(header, none) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"cannot drop capabilities: {os.strerror(errno)}")


def unshare(flags: int) -> None:
    """Move this process into new namespaces (e.g. a network of its own); OSError if not permitted."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(flags) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, os.strerror(errno))


def loopback_up() -> None:
    """Bring up the new network namespace's loopback, down when made, as Docker's "none" network has it: a
    job may then serve processes of its own on 127.0.0.1 and reach nothing else. Where the kernel does not
    permit it, the loopback stays down, and only such a job fails, saying it could not connect."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            ifreq = fcntl.ioctl(s, SIOCGIFFLAGS, struct.pack("16sh", b"lo", 0))
            flags = struct.unpack("16sh", ifreq[:18])[1]
            fcntl.ioctl(s, SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | IFF_UP))
        except OSError:
            pass


def die_with_parent() -> None:
    """Be killed when the process that forked this one ends (Linux: PR_SET_PDEATHSIG)."""
    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def undumpable() -> None:
    """Let no process of the same user open this one's memory or attach to it (Linux: PR_SET_DUMPABLE 0);
    kept across fork, so every child forked after is closed the same way."""
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0)


def as_init() -> None:
    """Fork into the new PID namespace: the child returns, as its pid 1; this process waits and ends the way
    the child ended."""
    child = os.fork()
    if child == 0:
        die_with_parent()
        return
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):
        signum = os.WTERMSIG(status)
        if signum != signal.SIGKILL:  # whose handler cannot be set, nor needs to be
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)  # only if that signal could not end this process
    os._exit(os.WEXITSTATUS(status))


def main(argv: list[str]) -> None:
    spec = json.loads(argv[1])
    confine(spec["rlimits"], spec["unshare"])
    os.execv(argv[2], argv[2:])


if __name__ == "__main__":
    main(sys.argv)
