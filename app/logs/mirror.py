"""Mirroring: one reader per attempt on the host streams the log into the local LogFile.

The reader runs over the host's existing SSH connection and frames what it sends, so the mirror
learns exactly where the host's file was truncated or replaced, and when the server has exited
and the log is drained, with the host file's sha256 to compare against. After a disconnect or a
dashboard restart it starts again at the mirrored offset, first checking that the bytes just
before it are still the ones mirrored.

What runs the reader must not depend on the launch it watches: a preset whose `python` is wrong
makes a launch fail, and that launch's log (with the shell's "not found" in it) is the one most
worth having. So a constant /bin/sh script picks the reader: a Python 3 found on the host's PATH
(`python3`, then `python`) runs the Python reader, which is cheap while a log streams; a host
without one gets a POSIX shell reader that does the same with sh and coreutils (stat, tail,
head, wc, sha256sum, mktemp) and speaks the same frames, so this side has one code path. The
shell reader polls more slowly (0.1 s when idle) and hashes the host's file at the end instead of
as it streams; both send the same bytes and the same end frame.

A Slurm job's output is read on the cluster's login node, where no process of the job runs: its
end is a file in the job's directory instead (written by the batch script when the server ends,
or by the dashboard once Slurm says the job is over), which the reader waits for as it would for
the end of a process.

A mirror whose reader keeps failing is retried with backoff for as long as its attempt runs. Once
the attempt has ended, a reader that fails GIVE_UP_AFTER times in a row without progress (the
host gone for good, the log unreadable) is given up: the log records why, and the mirror ends.
A restart of the dashboard tries again.

When the data dir is full the mirror pauses: the append that failed left the local file as it
was (see store.py), so the next read starts at exactly the same offset and sends the same bytes.
It tries again every DISK_FULL_RETRY seconds (room comes back when someone frees it, not faster
for asking) and says "log mirror paused: the data dir is full: ..." on the attempt meanwhile.

Replicas share the data dir: the mirror writes only while its source is `owned` (the host's lease
is current by this process's clock, app.leases). A controller that wakes from a stall past its
lease may hold bytes its reader took in before it stalled, which the host's new owner mirrors too:
it writes nothing of them, nor any metadata, and waits for its controller's next beat to decide.
That beat either lets the host go (and its controller stops this mirror: the new owner mirrors the
log) or renews the lease after all (a beat under way when the lease lapsed by this clock, which the
database saw renewed in time: nobody else can have owned the host), and the mirror reads on from
its end, which no later event would restart. The store refuses a stale append too (store.py),
should the process stall between that check and its write; the owner whose log it so got ahead of
takes those bytes in and resumes after them, the reader checking them against the host's file as
after any resume.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import struct
from collections.abc import Callable, Collection
from dataclasses import dataclass

import asyncssh

from app.backoff import Backoff
from app.errors import DiskFull, HostError, HostUnavailable
from app.leases import LeaseLost
from app.logs.merge import LogMerger, MergePart
from app.logs.store import LogFile, LogStore
from app.ssh import HostConnection

log = logging.getLogger(__name__)

FRAME = struct.Struct(">cI")
RETRY_MIN = 0.1
RETRY_MAX = 10.0
DISK_FULL_RETRY = 1.0
OWNED_AGAIN_POLL = 0.1  # seconds: how often a mirror whose lease lapsed asks whether its beat renewed it
# Failed reads in a row, none of which got anywhere, after which an ended attempt's mirror stops.
GIVE_UP_AFTER = 10
# Reads of ended attempts' logs at once, per process: a restart resumes the mirrors of a week of
# ended attempts (thousands, at a busy team's pace), each a reader process on its host, and all at
# once they would starve the hosts and the launches waiting on them.
DRAINS_AT_ONCE = 4

# argv: log path, offset, pid, process start time, overlap length, overlap sha256, end file (the
# log ends when it exists; "" to end with the process instead).
# Frames: D data | R restart (the file was truncated or replaced; reading again from 0)
# | E end (the process has exited and everything is sent: {"size", "sha256"} of the file).
READER = r"""
import hashlib, json, os, struct, sys, time
path, offset, pid, start, overlap, overlap_sha, end_file = sys.argv[1:8]
offset, overlap = int(offset), int(overlap)
out = sys.stdout.buffer
def send(kind, payload=b""):
    out.write(struct.pack(">cI", kind, len(payload)) + payload)
    out.flush()
def running():
    if end_file:
        return not os.path.exists(end_file)
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


# $1: the Python reader's text; $2...: its argv (above). Runs it with a Python 3 from the host's
# PATH or, where there is none, reads the log itself with the same frames. The shell reader keeps
# the file open on fd 3, as the Python one does, and reads it again through /proc/$$/fd/3, so a
# file replaced under its name is read to its end and then noticed by its inode. A chunk goes
# through a temporary file: a frame's length is known before its bytes are sent, even when the
# file is truncated while it is read.
START_READER = r"""
reader=$1; shift
for python in python3 python; do
  if command -v "$python" >/dev/null 2>&1 && "$python" -c 'import sys; sys.exit(sys.version_info < (3, 8))' 2>/dev/null
  then exec "$python" -c "$reader" "$@"
  fi
done
path=$1 offset=$2 pid=$3 start=$4 overlap=$5 overlap_sha=$6 end_file=$7
tmp=$(mktemp) || exit 1
trap 'rm -f "$tmp"' EXIT
trap 'exit 143' HUP INT TERM
header() {  # $1: the kind, $2: the payload's length, as 4 bytes big-endian in octal escapes
  set -- "$1" $(($2 >> 24 & 255)) $(($2 >> 16 & 255)) $(($2 >> 8 & 255)) $(($2 & 255))
  printf "$(printf '%s\\%03o\\%03o\\%03o\\%03o' "$@")"
}
send() { header "$1" ${#2}; printf '%s' "$2"; }
running() {
  if [ -n "$end_file" ]; then [ ! -e "$end_file" ]; return; fi
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
  set -- ${stat##*) }
  [ $# -ge 20 ] && [ "$1" != Z ] || return 1
  shift 19
  [ -z "$start" ] || [ "$1" = "$start" ]
}
sha256_of() { set -- $(head -c "$1" "/proc/$$/fd/3" | sha256sum); echo "$1"; }
opened=0 ended=0
while :; do
  if [ $opened = 0 ]; then
    if [ ! -e "$path" ]; then
      if ! running; then send E '{"size": 0, "sha256": null}'; exit 0; fi
      sleep 0.05 2>/dev/null || sleep 1
      continue
    fi
    [ -f "$path" ] || { echo "$path: not a regular file" >&2; exit 1; }
    command exec 3< "$path" || exit 1
    opened=1
    opened_as=$(stat -L -c '%i %s' "/proc/$$/fd/3") || exit 1
    set -- $opened_as
    inode=$1
    if [ "$offset" -gt "$2" ]; then
      send R truncated
      offset=0
    elif [ "$overlap" -gt 0 ]; then
      set -- $(tail -c +$((offset - overlap + 1)) "/proc/$$/fd/3" | head -c "$overlap" | sha256sum)
      if [ "$1" != "$overlap_sha" ]; then send R replaced; offset=0; fi
    fi
    overlap=0
  fi
  size=$(stat -L -c %s "/proc/$$/fd/3") || exit 1
  if [ "$size" -gt "$offset" ]; then
    tail -c +$((offset + 1)) "/proc/$$/fd/3" | head -c 1048576 > "$tmp" || exit 1
    n=$(($(wc -c < "$tmp")))
    if [ $n -gt 0 ]; then
      header D $n
      cat "$tmp" || exit 1
      offset=$((offset + n))
      continue
    fi
  fi
  if [ $ended = 1 ]; then
    send E "{\"size\": $offset, \"sha256\": \"$(sha256_of "$offset")\"}"
    exit 0
  fi
  now=$(stat -L -c '%i %s' "$path" 2>/dev/null)
  if [ -n "$now" ] && [ "${now% *}" != "$inode" ]; then
    exec 3<&-
    opened=0
    send R replaced
    offset=0
  elif [ -n "$now" ] && [ "${now#* }" -lt "$offset" ]; then
    send R truncated
    offset=0
  elif ! running; then
    ended=1  # one more read to the end of the file, then the end frame
  else
    sleep 0.1 2>/dev/null || sleep 1
  fi
done
"""


@dataclass(frozen=True)
class MirrorSource:
    """Where an attempt's log is on its host, and the process (or, for a Slurm job, the file)
    whose end (or appearance) ends the log."""

    connection: HostConnection
    path: str
    pid: int | None
    start_time: int | None
    end_file: str | None = None
    owned: Callable[[], bool] = lambda: True  # whether this process may write the log now (its host's lease)


class LogMirror:
    def __init__(
        self,
        log_file: LogFile,
        source: MirrorSource,
        *,
        retry_max: float = RETRY_MAX,
        give_up_after: int = GIVE_UP_AFTER,
        drains: asyncio.Semaphore | None = None,
    ):
        self.log = log_file
        self.source = source
        self.drains = drains or asyncio.Semaphore(DRAINS_AT_ONCE)  # shared by a process's mirrors
        self.retry_max = retry_max
        self.give_up_after = give_up_after
        self.done = asyncio.Event()  # set when the log is complete, or the mirror gave up
        self.error: str | None = None  # why the last read ended, while it is being retried
        self.paused = False  # the last read ended because the data dir is full
        self.connects = 0  # reads started: 1 + the number of times it resumed
        self.attempt_ended = False  # then failing reads are counted, and the mirror gives up
        self._progressed = False

    @property
    def _about(self) -> dict[str, object]:
        """What this mirror's log records are about, as fields of the JSON log (app.logging_setup)."""
        return {"attempt_id": self.log.attempt_id, "host": self.source.connection.name}

    def end_of_attempt(self) -> None:
        """The attempt has ended on its host: a reader that keeps failing is given up from now on."""
        self.attempt_ended = True

    async def run(self) -> None:
        retry, failures = Backoff(RETRY_MIN, self.retry_max), 0
        while not self.log.meta.complete:
            self._progressed = False
            try:
                # While the attempt runs the host is waited for; after its end, a host that stays
                # away is one more failed try.
                async with self.drains if self.attempt_ended else contextlib.nullcontext():
                    await self.source.connection.wait_online(self.retry_max if self.attempt_ended else 3600)
                    await self._read()
            except LeaseLost as exc:
                if not self.source.owned():
                    # The next beat decides: the host let go (its controller stops this mirror) or renewed.
                    log.info("attempt %d: log mirror waits: %s", self.log.attempt_id, exc, extra=self._about)
                    while not self.source.owned():
                        await asyncio.sleep(OWNED_AGAIN_POLL)
                    log.info(
                        "attempt %d: log mirror resumes: the lease was renewed", self.log.attempt_id, extra=self._about
                    )
                    continue
                # Its own host, written past by another process that stalled mid-append past its
                # lease: those bytes are taken in, and checked against the host's as the reader resumes.
                log.warning("attempt %d: log mirror resumes after %s", self.log.attempt_id, exc, extra=self._about)
                self.log.written_elsewhere(self.log.path.stat().st_size)
            except DiskFull as exc:
                self.error, self.paused = str(exc), True
                log.warning("attempt %d: log mirror paused: %s", self.log.attempt_id, exc, extra=self._about)
                await asyncio.sleep(DISK_FULL_RETRY)
            except (HostError, OSError, asyncssh.Error, asyncio.IncompleteReadError) as exc:
                if isinstance(exc, TimeoutError):
                    last_error = self.source.connection.status.last_error
                    exc = HostUnavailable(self.source.connection.name, f"offline ({last_error or 'no answer'})")
                self.error, self.paused = str(exc) or type(exc).__name__, False
                failures = 0 if self._progressed else failures + 1
                if self.attempt_ended and failures >= self.give_up_after:
                    self._give_up(failures)
                    return
                log.info(
                    "attempt %d: log mirror interrupted (%s); resuming",
                    self.log.attempt_id,
                    self.error,
                    extra=self._about,
                )
                # A reader that got somewhere resumes after the shortest wait; one that keeps failing backs off.
                if self._progressed:
                    retry.reset()
                await asyncio.sleep(retry.next())
        self.error = None
        self.done.set()

    @property
    def note(self) -> str:
        """What the attempt shows about its mirror while the mirror is behind; "" while it keeps up."""
        if not self.error:
            return ""
        return f"log mirror paused: {self.error}" if self.paused else f"log mirror reconnecting: {self.error}"

    def _give_up(self, failures: int) -> None:
        reason = f"gave up after {failures} tries without progress after the attempt ended: {self.error}"
        log.warning("attempt %d: log mirror %s", self.log.attempt_id, reason, extra=self._about)
        if self.source.owned():  # else it is the host's new owner's to record
            self.log.mirror_stopped(reason)
        self.done.set()

    def _check_owned(self) -> None:
        """Raises LeaseLost unless this process may still write the log: asked before each write,
        as a controller woken from a stall learns here, before its next beat, that it may not."""
        if not self.source.owned():
            raise LeaseLost(f"{self.source.connection.name}: no longer this process's host")

    async def _read(self) -> None:
        source = self.source
        overlap, overlap_sha = self.log.overlap_sha256()
        argv = ["sh", "-c", START_READER, "sh", READER, source.path, str(self.log.host_offset), str(source.pid or "")]
        argv += [str(source.start_time or ""), str(overlap), overlap_sha, source.end_file or ""]
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
                    self._check_owned()
                    self.log.append(payload)
                elif kind == b"R":
                    self._check_owned()
                    self.log.mark_restart(payload.decode())
                elif kind == b"E":
                    end = json.loads(payload)
                    mirror_sha256 = await asyncio.to_thread(self.log.segment_sha256)
                    self._check_owned()
                    self.log.finish(host_size=end["size"], host_sha256=end["sha256"], mirror_sha256=mirror_sha256)
                    return


async def _reason(process: asyncssh.SSHClientProcess[bytes]) -> str:
    """The last line the reader wrote on stderr before it stopped (a traceback's exception), if any."""
    try:
        stderr = await asyncio.wait_for(process.stderr.read(4096), 1.0)
    except (TimeoutError, OSError, asyncssh.Error):
        stderr = b""
    lines = stderr.decode(errors="replace").strip().splitlines()
    return lines[-1].strip() if lines else "the log reader stopped"


class Mirrors:
    """Owned by the app's lifespan: exactly one running mirror per attempt (for a multi-node
    attempt, its merger)."""

    def __init__(self, store: LogStore, *, retry_max: float = RETRY_MAX, give_up_after: int = GIVE_UP_AFTER):
        self.store = store
        self.retry_max = retry_max  # for the mirrors started from now on; the tests shorten these
        self.give_up_after = give_up_after
        self.drains = asyncio.Semaphore(DRAINS_AT_ONCE)
        self._running: dict[int, tuple[LogMirror | LogMerger, asyncio.Task[None]]] = {}
        # Told of every log's growth and end (size): the announcer of live logs to other replicas.
        self.on_append: Callable[[int, int], None] | None = None

    def start(self, attempt_id: int, source: MirrorSource) -> LogMirror:
        """The attempt's mirror, started unless it runs already."""
        if attempt_id in self._running:
            running = self._running[attempt_id][0]
            assert isinstance(running, LogMirror), f"attempt {attempt_id} has a merged log"
            return running
        log_file = self.store.get(attempt_id)
        if log_file.path.exists():
            # Another controller may have mirrored it since this one last held it (its host went
            # there and came back): resume from the shared file as it is, not from what is in memory.
            log_file.written_elsewhere(log_file.path.stat().st_size)
        if log_file.meta.stopped:  # given up by an earlier run of the dashboard: tried again
            log_file.mirror_stopped(None)
        mirror = LogMirror(
            log_file, source, retry_max=self.retry_max, give_up_after=self.give_up_after, drains=self.drains
        )
        self._run(attempt_id, mirror)
        return mirror

    def merge(self, attempt_id: int, parts: list[MergePart]) -> LogMerger:
        """The multi-node attempt's merged log's merger (app.logs.merge), started unless it runs."""
        if attempt_id in self._running:
            running = self._running[attempt_id][0]
            assert isinstance(running, LogMerger), f"attempt {attempt_id} has a mirror of its own"
            return running
        merger = LogMerger(self.store.get(attempt_id), [(part, self.store.get(part.attempt_id)) for part in parts])
        self._run(attempt_id, merger, also=[part.attempt_id for part in parts])
        return merger

    async def stop(self, attempt_id: int) -> None:
        """Stops the attempt's mirror, if it runs: another controller mirrors it now."""
        if (running := self._running.get(attempt_id)) is not None:
            running[1].cancel()
            await asyncio.gather(running[1], return_exceptions=True)

    async def let_go(self, hosts: Collection[str]) -> None:
        """Stops the mirrors of the logs on `hosts`, whose leases this process lost (an ended
        attempt's included, which no follower stands for): their new owner mirrors them now."""
        for attempt_id, writer in self.running():
            if isinstance(writer, LogMirror) and writer.source.connection.name in hosts:
                await self.stop(attempt_id)

    def get(self, attempt_id: int) -> LogMirror | LogMerger | None:
        running = self._running.get(attempt_id)
        return running[0] if running else None

    def running(self) -> list[tuple[int, LogMirror | LogMerger]]:
        return [(attempt_id, writer) for attempt_id, (writer, _) in self._running.items()]

    def _run(self, attempt_id: int, writer: LogMirror | LogMerger, also: list[int] | None = None) -> None:
        announce = self.on_append

        def appended(offset: int, data: bytes) -> None:
            if announce is not None:
                announce(attempt_id, offset + len(data))

        if announce is not None:
            writer.log.watchers.add(appended)
        task = asyncio.create_task(writer.run(), name=f"log-mirror-{attempt_id}")
        self._running[attempt_id] = (writer, task)

        def ended(_: object) -> None:
            writer.log.watchers.discard(appended)
            self._ended(attempt_id, also or [])

        task.add_done_callback(ended)

    def _ended(self, attempt_id: int, also: list[int]) -> None:
        _, task = self._running.pop(attempt_id)
        if not task.cancelled() and task.exception() is not None:
            log.error(
                "attempt %d: log mirror failed", attempt_id, exc_info=task.exception(), extra={"attempt_id": attempt_id}
            )
        for done in (attempt_id, *also):
            self.store.forget(done)

    async def close(self) -> None:
        tasks = [task for _, task in self._running.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
