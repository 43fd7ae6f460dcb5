"""Mirroring: one reader per attempt on the host streams the log into the local LogFile.

The reader is a small Python program run over the host's existing SSH connection (the preset's
own interpreter, which every SGLang host has). It frames what it sends, so the mirror learns
exactly where the host's file was truncated or replaced, and when the server has exited and the
log is drained, with the host file's sha256 to compare against. After a disconnect or a
dashboard restart it starts again at the mirrored offset, first checking that the bytes just
before it are still the ones mirrored.

When the data dir is full the mirror pauses: the append that failed left the local file as it
was (see store.py), so the next read starts at exactly the same offset and sends the same bytes.
It tries again every DISK_FULL_RETRY seconds (room comes back when someone frees it, not faster
for asking) and says "log mirror paused: the data dir is full: ..." on the attempt meanwhile.
"""

from __future__ import annotations

import asyncio
import json
import logging
import struct
from dataclasses import dataclass

import asyncssh

from app.errors import DiskFull, HostError
from app.logs.store import LogFile, LogStore
from app.ssh import HostConnection

log = logging.getLogger(__name__)

FRAME = struct.Struct(">cI")
RETRY_MIN = 0.1
RETRY_MAX = 10.0
DISK_FULL_RETRY = 1.0

# argv: log path, offset, pid, process start time, overlap length, overlap sha256.
# Frames: D data | R restart (the file was truncated or replaced; reading again from 0)
# | E end (the process has exited and everything is sent: {"size", "sha256"} of the file).
READER = r"""
import hashlib, json, os, struct, sys, time
path, offset, pid, start, overlap, overlap_sha = sys.argv[1:7]
offset, overlap = int(offset), int(overlap)
out = sys.stdout.buffer
def send(kind, payload=b""):
    out.write(struct.pack(">cI", kind, len(payload)) + payload)
    out.flush()
def running():
    try:
        with open("/proc/%s/stat" % pid) as f:
            fields = f.read().rpartition(")")[2].split()
    except (OSError, ValueError):
        return False
    return fields[0] != "Z" and (not start or fields[19] == start)
def digest_of(f, size):
    digest = hashlib.sha256()
    f.seek(0)
    while size > 0 and (block := f.read(min(1 << 20, size))):
        digest.update(block)
        size -= len(block)
    return digest
f, ended, idle = None, False, 0.0
while True:
    if f is None:
        try:
            f = open(path, "rb")
        except FileNotFoundError:
            if not running():
                send(b"E", json.dumps({"size": 0, "sha256": None}).encode())
                break
            time.sleep(0.05)
            continue
        inode, size = os.fstat(f.fileno()).st_ino, os.fstat(f.fileno()).st_size
        if offset > size:
            send(b"R", b"truncated")
            offset = 0
        elif overlap:
            f.seek(offset - overlap)
            if hashlib.sha256(f.read(overlap)).hexdigest() != overlap_sha:
                send(b"R", b"replaced")
                offset = 0
        overlap = 0
        digest = digest_of(f, offset)  # the file's sha256 is kept up as it is sent
        f.seek(offset)
    data = f.read(1 << 20)
    if data:
        offset += len(data)
        digest.update(data)
        send(b"D", data)
        idle = 0.0
        continue
    if ended:
        send(b"E", json.dumps({"size": offset, "sha256": digest.hexdigest()}).encode())
        break
    try:
        now = os.stat(path)
    except FileNotFoundError:
        now = None
    if now is not None and now.st_ino != inode:
        f.close()
        f = None
        send(b"R", b"replaced")
        offset = 0
    elif now is not None and now.st_size < offset:
        send(b"R", b"truncated")
        offset, digest = 0, hashlib.sha256()
        f.seek(0)
    elif not running():
        ended = True  # one more read to the end of the file, then the end frame
    else:
        time.sleep(min(0.005 + idle, 0.05))
        idle += 0.005
"""


@dataclass(frozen=True)
class MirrorSource:
    """Where an attempt's log is on its host, and the process whose end ends the log."""

    connection: HostConnection
    python: str
    path: str
    pid: int
    start_time: int | None


class LogMirror:
    def __init__(self, log_file: LogFile, source: MirrorSource):
        self.log = log_file
        self.source = source
        self.done = asyncio.Event()
        self.error: str | None = None  # why the last read ended, while it is being retried
        self.paused = False  # the last read ended because the data dir is full
        self.connects = 0  # reads started: 1 + the number of times it resumed
        self._progressed = False

    async def run(self) -> None:
        retry = RETRY_MIN
        while not self.log.meta.complete:
            try:
                await self.source.connection.wait_online(3600)
                await self._read()
            except DiskFull as exc:
                self.error, self.paused = str(exc), True
                log.warning("attempt %d: log mirror paused: %s", self.log.attempt_id, exc)
                await asyncio.sleep(DISK_FULL_RETRY)
            except (HostError, OSError, asyncssh.Error, asyncio.IncompleteReadError) as exc:
                self.error, self.paused = str(exc) or type(exc).__name__, False
                log.info("attempt %d: log mirror interrupted (%s); resuming", self.log.attempt_id, self.error)
                # A reader that got somewhere resumes at once; one that keeps failing backs off.
                retry = RETRY_MIN if self._progressed else min(retry * 2, RETRY_MAX)
                await asyncio.sleep(retry)
        self.error = None
        self.done.set()

    @property
    def note(self) -> str:
        """What the attempt shows about its mirror while the mirror is behind; "" while it keeps up."""
        if not self.error:
            return ""
        return f"log mirror paused: {self.error}" if self.paused else f"log mirror reconnecting: {self.error}"

    async def _read(self) -> None:
        source = self.source
        overlap, overlap_sha = self.log.overlap_sha256()
        argv = [source.python, "-c", READER, source.path, str(self.log.host_offset), str(source.pid)]
        argv += [str(source.start_time or ""), str(overlap), overlap_sha]
        self._progressed = False
        async with source.connection.stream(argv) as process:
            self.connects += 1
            stdout = process.stdout
            while True:
                try:
                    kind, length = FRAME.unpack(await stdout.readexactly(FRAME.size))
                except asyncio.IncompleteReadError:
                    raise HostError(source.connection.name, await _reason(process)) from None
                payload = await stdout.readexactly(length) if length else b""
                self.error, self._progressed = None, True
                if kind == b"D":
                    self.log.append(payload)
                elif kind == b"R":
                    self.log.mark_restart(payload.decode())
                elif kind == b"E":
                    end = json.loads(payload)
                    mirror_sha256 = await asyncio.to_thread(self.log.segment_sha256)
                    self.log.finish(host_size=end["size"], host_sha256=end["sha256"], mirror_sha256=mirror_sha256)
                    return


async def _reason(process: asyncssh.SSHClientProcess[bytes]) -> str:
    """What the reader said on stderr before it stopped, if anything."""
    try:
        stderr = await asyncio.wait_for(process.stderr.read(4096), 1.0)
    except (TimeoutError, OSError, asyncssh.Error):
        stderr = b""
    return stderr.decode(errors="replace").strip() or "the log reader stopped"


class Mirrors:
    """Owned by the app's lifespan: exactly one running mirror per attempt."""

    def __init__(self, store: LogStore):
        self.store = store
        self._running: dict[int, tuple[LogMirror, asyncio.Task[None]]] = {}

    def start(self, attempt_id: int, source: MirrorSource) -> LogMirror:
        """The attempt's mirror, started unless it runs already."""
        if attempt_id in self._running:
            return self._running[attempt_id][0]
        mirror = LogMirror(self.store.get(attempt_id), source)
        task = asyncio.create_task(mirror.run(), name=f"log-mirror-{attempt_id}")
        self._running[attempt_id] = (mirror, task)
        task.add_done_callback(lambda _: self._ended(attempt_id))
        return mirror

    def get(self, attempt_id: int) -> LogMirror | None:
        running = self._running.get(attempt_id)
        return running[0] if running else None

    def _ended(self, attempt_id: int) -> None:
        _, task = self._running.pop(attempt_id)
        if not task.cancelled() and task.exception() is not None:
            log.error("attempt %d: log mirror failed", attempt_id, exc_info=task.exception())
        self.store.forget(attempt_id)

    async def close(self) -> None:
        tasks = [task for _, task in self._running.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
