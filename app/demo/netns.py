"""A simulated host's own network: a Linux network namespace with a loopback of its own.

Real GPU hosts are separate machines: a server on port 30000 of one leaves port 30000 free on
every other. Simulated hosts run on one machine, so without this they share one loopback, and a
server on one host made the port check fail on all of them. Each host's commands therefore run
in a namespace of its own (through `nsenter`), and the connections its SSH server forwards to
"127.0.0.1" are opened inside it. The SSH server itself stays on this machine's loopback, where
the dashboard reaches it.

The namespace is held by a keeper process of its own (found again by its pid file when the host's
process restarts, so servers left running keep their network) and by a descriptor in the host's
process. Creating one needs the right to (root, or user namespaces); where that is refused the
hosts share the loopback as before, and `NetworkNamespace.held_by` says why.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import threading
from pathlib import Path

CLONE_NEWNET = 0x40000000
KEEPER_MARK = "launchdeck-sim-network"  # in the keeper's command line: a reused pid is not taken for it
_libc = ctypes.CDLL(None, use_errno=True)


class NetworkNamespace:
    def __init__(self, fd: int, pid_file: Path, keeper: subprocess.Popen[bytes] | None = None):
        self.fd = fd
        self.pid_file = pid_file
        self._keeper = keeper  # when this process started it

    @classmethod
    def held_by(cls, pid_file: Path, env: dict[str, str]) -> NetworkNamespace:
        """The namespace whose keeper `pid_file` names, or a new one with its loopback up and a new
        keeper; OSError with the reason where none can be made. The keeper (a sleeping process of
        its own session, with `env`) keeps the network while the host's SSH server restarts, as a
        machine's network outlives its sshd; killing it is the host shutting down."""
        with contextlib.suppress(OSError, ValueError):
            pid = int(pid_file.read_text())
            if KEEPER_MARK.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                return cls(os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC), pid_file)
        try:
            keeper = subprocess.Popen(
                ["unshare", "--net", "sh", "-c", "ip link set lo up && echo up && sleep infinity", KEEPER_MARK],
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                start_new_session=True,
            )  # fmt: skip
        except FileNotFoundError as exc:
            raise OSError(f"cannot make a network namespace: {exc.filename} is not installed") from None
        assert keeper.stdout and keeper.stderr
        with keeper.stdout, keeper.stderr:
            if keeper.stdout.readline() == b"up\n":
                pid_file.write_text(f"{keeper.pid}\n")
                return cls(os.open(f"/proc/{keeper.pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC), pid_file, keeper)
            said = keeper.stderr.read().decode(errors="replace").strip().splitlines()
        keeper.wait(5)
        raise OSError(f"cannot make a network namespace: {said[-1] if said else 'unshare failed'}")

    @property
    def path(self) -> str:
        return f"/proc/{os.getpid()}/fd/{self.fd}"

    def command(self, argv: list[str]) -> list[str]:
        """`argv` run inside the namespace (nsenter execs it: the pid and process group stay its own)."""
        return ["nsenter", f"--net={self.path}", "--", *argv]

    def connect(self, port: int, timeout: float = 5.0) -> socket.socket:
        """A TCP connection to 127.0.0.1:`port` inside the namespace. Blocking: a thread of its own
        enters the namespace, so no other thread's sockets are ever made there."""
        result: list[socket.socket | BaseException] = []

        def enter_and_connect() -> None:
            try:
                if _libc.setns(self.fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), "setns failed")
                result.append(socket.create_connection(("127.0.0.1", port), timeout=timeout))
            except BaseException as exc:  # handed to the caller's thread
                result.append(exc)

        thread = threading.Thread(target=enter_and_connect, name="netns-connect")
        thread.start()
        thread.join()  # the thread ends in the namespace and is gone with it
        (outcome,) = result
        if isinstance(outcome, BaseException):
            raise outcome
        outcome.setblocking(False)
        return outcome

    def close(self) -> None:
        """Takes the network down with its keeper, as the host shutting down would."""
        with contextlib.suppress(OSError, ValueError):
            os.killpg(int(self.pid_file.read_text()), signal.SIGKILL)
        self.pid_file.unlink(missing_ok=True)
        if self._keeper is not None:
            self._keeper.wait(5)
        os.close(self.fd)
