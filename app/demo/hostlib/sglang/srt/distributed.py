"""How the ranks of a multi-node server meet and stay linked, as torch.distributed does it for SGLang.

The model, rank by rank (TP ranks are numbered across nodes; the world is `--tp` ranks):
- Rendezvous. `--dist-init-addr HOST:PORT` names the TCPStore of global rank 0 (TP0 on node 0):
  it listens on PORT, every other rank on every node connects to it and registers, and once all
  ranks have joined, every rank goes on to load its weights. Rank 0 counts itself as joined.
- Timeouts. Both sides wait `--dist-timeout` seconds (without it torch's default for NCCL process
  groups, 600). Rank 0 then fails with torch's `DistStoreError` ("Timed out after N seconds
  waiting for clients. J/W clients joined."); a rank that cannot reach the store warns on its
  first refused connection, keeps retrying and fails with `DistNetworkError` ("The client socket
  has timed out after Nms while trying to connect to (HOST, PORT)."). A rank whose store goes away
  before everyone joined fails with the store client's "Failed to recv, got 0 bytes" error.
- Links. The connections stay open while the server runs, standing for the gloo pairs over which
  SGLang's schedulers broadcast every step. A rank whose peer goes away (killed, or its node torn
  down after a failure such as an out-of-memory error) fails with gloo's "Connection closed by
  peer [ADDRESS]:PORT"; its node's main process then takes that node down, and so on, so one
  node's end ends them all.
- Without `--dist-init-addr` each node meets at an address of its own (its loopback), so nodes
  never meet: rank 0 times out waiting and the other node's ranks time out connecting, as with
  real SGLang.
- The network. Each simulated host has a loopback of its own (app/demo/netns.py); what joins the
  hosts is this machine's loopback, where their SSH servers listen and which the host's commands
  find named in LAUNCHDECK_SIM_CLUSTER_NETWORK. Every simulated host is 127.0.0.1 there, so the
  store listens and is reached on 127.0.0.1 whatever host the address names (the wording keeps
  the name given). Where the hosts share this machine's loopback, that loopback is the network.

The torch and gloo wordings are written as torch 2.13 formats them (libtorch's TCPStore and
socket messages, gloo's tcp pair errors); times are simulated seconds (see `time_scale`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import socket
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime

from sglang.srt.utils import time_scale

CLUSTER_NETWORK_ENV = "LAUNCHDECK_SIM_CLUSTER_NETWORK"
DEFAULT_TIMEOUT_SECONDS = 600  # torch's default timeout for NCCL process groups
CLONE_NEWNET = 0x40000000
GLOO_PAIR = "/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:547"
RETRY_SECONDS = 0.05  # real seconds between connection attempts


class DistError(RuntimeError):
    pass


class DistStoreError(DistError):
    pass


class DistNetworkError(DistError):
    pass


for _error in (DistError, DistStoreError, DistNetworkError):
    _error.__module__ = "torch.distributed"


def tcp_socket(between_hosts: bool) -> socket.socket:
    """A TCP socket on the network between the hosts, or on this host's own loopback (a socket
    belongs to the network it was made in)."""
    path = os.environ.get(CLUSTER_NETWORK_ENV)
    if not path or not between_hosts:
        return socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    made: list[socket.socket | BaseException] = []

    def enter_and_make() -> None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
                    raise OSError(ctypes.get_errno(), f"cannot enter the cluster network {path}")
            finally:
                os.close(fd)
            made.append(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
        except BaseException as exc:  # handed to the caller's thread
            made.append(exc)

    thread = threading.Thread(target=enter_and_make, name="cluster-network")
    thread.start()
    thread.join()  # the thread ends inside that network; no other thread's sockets are made there
    (outcome,) = made
    if isinstance(outcome, BaseException):
        raise outcome
    return outcome


def c10d_warning(line: int, message: str) -> None:
    """A warning from libtorch's C++ logging, written straight to stderr as it does."""
    now = datetime.now()
    sys.stderr.write(f"[W{now:%m%d} {now:%H:%M:%S}.{now.microsecond * 1000:09d} socket.cpp:{line}] [c10d] {message}\n")
    sys.stderr.flush()


class ProcessGroup:
    """This rank's links to the others once all have joined: rank 0 holds one per other rank,
    every other rank one to rank 0."""

    def __init__(self, rank: int, world_size: int, links: list[socket.socket]):
        self.rank = rank
        self.world_size = world_size
        self.links = links
        self.peers = {link: link.getpeername()[:2] for link in links}  # kept: a closed link may not say

    def watch(self, on_lost: Callable[[BaseException], None]) -> None:
        """Calls `on_lost` with gloo's error, raised in a thread of its own, once any link closes."""

        def watch_links() -> None:
            try:
                self.wait_for_a_closed_link()
            except RuntimeError as error:
                on_lost(error)

        threading.Thread(target=watch_links, name="gloo-pairs", daemon=True).start()

    def wait_for_a_closed_link(self) -> None:
        while True:
            readable, _, _ = select.select(self.links, [], [])
            for link in readable:
                try:
                    data = link.recv(4096)
                except OSError:
                    data = b""
                if not data:
                    host, port = self.peers[link]
                    raise RuntimeError(f"[{GLOO_PAIR}] Connection closed by peer [{host}]:{port}")


def parse_address(address: str) -> tuple[str, int]:
    """HOST:PORT, or [IPv6]:PORT, as SGLang's NetworkAddress.parse reads --dist-init-addr."""
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def init_process_group(
    address: tuple[str, int], rank: int, world_size: int, timeout: int | None, between_hosts: bool
) -> ProcessGroup:
    """Meets the other ranks at `address` (rank 0 hosts the store); see the module docstring."""
    seconds = DEFAULT_TIMEOUT_SECONDS if timeout is None else timeout
    if rank == 0:
        return StoreServer(address, world_size, seconds, between_hosts).wait_for_clients()
    return ProcessGroup(rank, world_size, [join_store(address, rank, seconds, between_hosts)])


class StoreServer:
    def __init__(self, address: tuple[str, int], world_size: int, timeout: int, between_hosts: bool):
        self.world_size = world_size
        self.timeout = timeout
        self.listener = tcp_socket(between_hosts)
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.listener.bind(("127.0.0.1", address[1]))
        except OSError as exc:
            self.listener.close()
            name, message = ("EADDRINUSE", "address already in use") if exc.errno == 98 else ("EACCES", str(exc))
            raise DistNetworkError(
                "The server socket has failed to listen on any local network address. "
                f"port: {address[1]}, useIpv6: 0, code: -{exc.errno}, name: {name}, message: {message}"
            ) from None
        self.listener.listen(64)

    def wait_for_clients(self) -> ProcessGroup:
        deadline = time.monotonic() + self.timeout * time_scale()
        clients: list[socket.socket] = []
        joined = 1  # rank 0's own client
        buffers: dict[socket.socket, bytes] = {}
        while joined < self.world_size:
            left = deadline - time.monotonic()
            if left <= 0:  # the clients see their links close when this process is gone
                self.listener.close()
                raise DistStoreError(
                    f"Timed out after {self.timeout + 1} seconds waiting for clients. "
                    f"{joined}/{self.world_size} clients joined."
                )
            waiting = [self.listener, *(c for c in clients if c in buffers)]
            readable, _, _ = select.select(waiting, [], [], min(left, 1.0))
            for ready in readable:
                if ready is self.listener:
                    client, _ = self.listener.accept()
                    clients.append(client)
                    buffers[client] = b""
                    continue
                data = ready.recv(64)
                buffers[ready] += data
                if b"\n" in buffers[ready] or not data:  # a client that left after joining still counts
                    del buffers[ready]
                    joined += 1 if data else 0
        self.listener.close()
        for client in clients:
            with contextlib.suppress(OSError):
                client.sendall(b"go\n")
        return ProcessGroup(0, self.world_size, clients)


def join_store(address: tuple[str, int], rank: int, timeout: int, between_hosts: bool) -> socket.socket:
    host, port = address
    deadline = time.monotonic() + timeout * time_scale()
    warned = False
    while True:
        link = tcp_socket(between_hosts)
        try:
            link.connect(("127.0.0.1", port))
            break
        except OSError as exc:
            link.close()
            if not warned:
                reason = f"errno: {exc.errno} - {os.strerror(exc.errno)}" if exc.errno else str(exc)
                c10d_warning(752, f"The client socket has failed to connect to [{host}]:{port} ({reason}).")
                warned = True
            if time.monotonic() >= deadline:
                raise DistNetworkError(
                    f"The client socket has timed out after {timeout * 1000}ms "
                    f"while trying to connect to ({host}, {port})."
                ) from None
            time.sleep(RETRY_SECONDS)
    link.sendall(f"{rank}\n".encode())
    reply = b""
    while not reply.endswith(b"\n"):
        data = link.recv(64)
        if not data:
            link.close()
            raise DistNetworkError(
                "Failed to recv, got 0 bytes. Connection was likely closed. Did the remote server shutdown or crash?"
            )
        reply += data
    return link
