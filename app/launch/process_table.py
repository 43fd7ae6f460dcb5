"""What a host's process table says of a server launchdeck did not start: the process listening on
a port, its exact argv and start time, the environment that matters to SGLang (secrets withheld:
their names kept, never their values), its working directory and where its output goes. Read with
the constant scripts of app.launch.remote, parsed here; app.launch.adopt records what they found."""

from __future__ import annotations

import base64
import ipaddress
import posixpath
import re
from dataclasses import dataclass
from datetime import UTC, datetime

from app.errors import InvalidInput, NotFound
from app.launch import remote
from app.presets.revisions import LAUNCHERS
from app.ssh import HostConnection

# The environment an SGLang server's behaviour depends on; the rest (PATH, HOME, the shell's) is
# the host's, not the server's configuration.
KEPT_ENV_PREFIXES = (
    "CUDA_", "SGLANG_", "NCCL_", "HF_", "HUGGINGFACE_", "HUGGING_FACE_", "TRANSFORMERS_", "TORCH", "PYTORCH_",
    "TRITON_", "FLASHINFER_", "NVIDIA_", "NVSHMEM_", "GLOO_", "UCX_", "OMP_", "TOKENIZERS_", "MASTER_",
)  # fmt: skip
# A name with one of these words holds a secret: its value is never stored, only that it was set.
SECRET_WORDS = frozenset({"TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASS", "KEY", "APIKEY", "CREDENTIAL", "AUTH"})
# Values that are secrets whatever their name: a Hugging Face token, a URL with a password in it.
SECRET_VALUE = re.compile(r"\bhf_[A-Za-z0-9]{20,}|://[^/@\s:]+:[^/@\s]+@")
WITHHELD = "<withheld>"


@dataclass(frozen=True)
class ServerCommand:
    """An SGLang server's command line read as a preset revision."""

    launcher: str
    python: str
    model_path: str
    args: list[str]  # less --model-path and --port, which are the revision's own fields


@dataclass(frozen=True)
class Output:
    """Where one of the process's standard streams goes."""

    fd: int
    target: str  # a file's path, "pipe:[…]", "socket:[…]", "/dev/pts/3"; "" where it could not be read
    is_file: bool
    size: int = 0
    path_current: bool = False  # the path still names the file the process writes

    @property
    def described(self) -> str:
        kinds = (("pipe:", "a pipe"), ("socket:", "a socket"), ("/dev/pts/", "a terminal"), ("/dev/tty", "a terminal"))
        kind = next((name for prefix, name in kinds if self.target.startswith(prefix)), None)
        return kind or (self.target if self.target else "somewhere launchdeck cannot read")


@dataclass(frozen=True)
class ServerProcess:
    """The process found listening on the port, as its /proc entry shows it."""

    pid: int
    pgid: int
    start_time: int
    started_at: datetime | None
    owner: str  # "alice (uid 1000)"
    argv: list[str]
    environ: dict[str, str] | None  # None where launchdeck's account may not read it
    cwd: str
    outputs: tuple[Output, Output]
    tree: set[int]  # its pid and its descendants'

    @property
    def log(self) -> Output | None:
        """Its log: stderr's file (where SGLang's logging writes), else stdout's; None for neither."""
        return next((output for output in reversed(self.outputs) if output.is_file), None)

    def log_link(self) -> str:
        """What the attempt's server.log links to: the file's path while that names it still, else
        the process's own descriptor (a log deleted or replaced under its name); "" for no log."""
        log = self.log
        if log is None:
            return ""
        return log.target if log.path_current else f"/proc/{self.pid}/fd/{log.fd}"


def server_command(argv: list[str]) -> ServerCommand | None:
    """The command line of `python -m sglang.launch_server` or `sglang serve`; None for any other."""
    for i, word in enumerate(argv):
        if word == "sglang.launch_server" and i and argv[i - 1] == "-m":
            launcher, python, rest = LAUNCHERS[0], argv[0], argv[i + 1 :]
            break
        if posixpath.basename(word) == "sglang" and argv[i + 1 : i + 2] == ["serve"]:
            # Run as a script, its interpreter comes first; the preset names the Python beside it.
            directory = posixpath.dirname(word)
            launcher, python, rest = LAUNCHERS[1], f"{directory}/python3" if directory else "python3", argv[i + 2 :]
            break
    else:
        return None
    model_path, args = "", []
    words = iter(rest)
    for word in words:
        option, has_value, value = word.partition("=")
        if option not in ("--model-path", "--model", "--port"):
            args.append(word)
            continue
        value = value if has_value else next(words, "")
        if option != "--port":
            model_path = value
    return ServerCommand(launcher, python, model_path, args)


def without_options(args: list[str], options: set[str]) -> list[str]:
    """`args` less the given options with their values."""
    kept: list[str] = []
    words = iter(args)
    for word in words:
        option, has_value, _ = word.partition("=")
        if option not in options:
            kept.append(word)
        elif not has_value:
            next(words, None)
    return kept


def _secret_name(name: str) -> bool:
    return bool(SECRET_WORDS & set(re.split(r"[-_]", name.strip("-").upper())))


def withheld_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """The argv with the values of options named like secrets (--api-key) replaced, and those options."""
    kept, withheld = [], []
    for i, arg in enumerate(argv):
        option, has_value, _ = arg.partition("=")
        previous = argv[i - 1] if i else ""
        if option.startswith("--") and _secret_name(option) and has_value:
            kept.append(f"{option}={WITHHELD}")
            withheld.append(option)
        elif previous.startswith("--") and "=" not in previous and _secret_name(previous) and not arg.startswith("--"):
            kept.append(WITHHELD)
            withheld.append(previous)
        else:
            kept.append(arg)
    return kept, withheld


def kept_env(environ: dict[str, str]) -> tuple[dict[str, str], list[str]]:
    """The variables that matter to SGLang, and the names of those withheld as secrets."""
    kept, withheld = {}, []
    for name, value in sorted(environ.items()):
        if not name.startswith(KEPT_ENV_PREFIXES):
            continue
        if _secret_name(name) or SECRET_VALUE.search(value):
            withheld.append(name)
        else:
            kept[name] = value
    return kept, withheld


def listener_of(text: str, *, port: int, host: str) -> tuple[int, str]:
    """The pid of the process listening on the port, as remote.LISTENERS's answer shows it, and the
    address to reach it at; refused where nothing listens (NotFound), or where launchdeck's account
    cannot see the process that does (InvalidInput)."""
    me, sockets, pids = "?", [], []
    for line in text.splitlines():
        key, _, value = line.partition("=")
        words = value.split()
        if key == "me" and words:
            me = words[0]
        elif key == "socket" and len(words) == 3:
            sockets.append((words[1], _address(words[2])))
        elif key == "pid" and len(words) == 2 and all(word.isdigit() for word in words):
            pids.append((int(words[0]), int(words[1])))
    if not sockets:
        raise NotFound(f"nothing listens on port {port} on {host}: there is no server to adopt")
    if not pids:
        owner = sockets[0][0]
        whose = "a process in another container" if owner == me else f"a process of uid {owner}"
        raise InvalidInput(
            f"port {port} on {host} is held by {whose}, which launchdeck's account there (uid {me}) may not "
            "read: only a server that account can see in the process table can be adopted"
        )
    holders = {pid for pid, _ in pids}
    # Workers that share the listening socket: the one whose parent does not hold it is the server.
    pid = min((pid for pid, parent in pids if parent not in holders), default=min(holders))
    address = sockets[0][1]
    if address.is_unspecified:  # every address of the host: its loopback too
        address = ipaddress.ip_address("::1" if address.version == 6 else "127.0.0.1")
    return pid, str(address)


def _address(kernel_hex: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address as /proc/net/tcp(6) writes it: 32-bit words in the host's (little-endian) order."""
    raw = bytes.fromhex(kernel_hex)
    return ipaddress.ip_address(b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4)))


def parse_process(pid: int, text: str) -> ServerProcess | None:
    """remote.PROCESS_DETAILS's answer; None when the process has exited meanwhile."""
    values = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    if values.get("gone") == "1" or "stat" not in values:
        return None

    def decoded(key: str) -> bytes:
        return base64.b64decode(values.get(key, ""))

    stat = decoded("stat").decode(errors="replace")
    fields = stat.rpartition(")")[2].split()  # after the command's name, which may hold anything
    if len(fields) < 20 or not fields[2].isdigit() or not fields[19].isdigit():
        return None
    pgid, start_time = int(fields[2]), int(fields[19])
    uid, _, user = values.get("uid", "").strip().partition(" ")
    boot, _, ticks = values.get("clock", "").partition(" ")
    started_at = None
    if boot.isdigit() and ticks.isdigit() and int(ticks):
        started_at = datetime.fromtimestamp(int(boot) + start_time / int(ticks), UTC)
    environ: dict[str, str] | None = None
    if "environ" in values:
        environ = {}
        for entry in decoded("environ").split(b"\0"):
            name, equals, value = entry.decode(errors="replace").partition("=")
            if equals:
                environ[name] = value
    argv = [arg.decode(errors="replace") for arg in decoded("cmdline").split(b"\0")]
    outputs = []
    for fd in (1, 2):
        file = values.get(f"file{fd}", "").split()
        outputs.append(
            Output(
                fd=fd,
                target=decoded(f"fd{fd}").decode(errors="replace"),
                is_file=len(file) == 2,
                size=int(file[1]) if len(file) == 2 else 0,
                path_current=bool(file) and values.get(f"path{fd}", "") == file[0],
            )
        )
    return ServerProcess(
        pid=pid,
        pgid=pgid,
        start_time=start_time,
        started_at=started_at,
        owner=f"{user} (uid {uid})" if user else f"uid {uid or '?'}",
        argv=argv[:-1] if argv and argv[-1] == "" else argv,
        environ=environ,
        cwd=decoded("cwd").decode(errors="replace"),
        outputs=(outputs[0], outputs[1]),
        tree={int(word) for word in values.get("tree", "").split() if word.isdigit()},
    )


async def find_server(connection: HostConnection, port: int) -> tuple[ServerProcess, str]:
    """The process listening on the port, and the address it listens on; refused (NotFound,
    InvalidInput) where nothing listens or its process cannot be read by launchdeck's account."""
    found = await connection.run(["sh", "-c", remote.LISTENERS, "sh", str(port)], check=False)
    pid, address = listener_of(found.stdout.decode(errors="replace"), port=port, host=connection.name)
    details = await connection.run(["sh", "-c", remote.PROCESS_DETAILS, "sh", str(pid)], check=False)
    server = parse_process(pid, details.stdout.decode(errors="replace"))
    if server is None:
        raise NotFound(f"the process on port {port} on {connection.name} (pid {pid}) has just exited")
    if not server.argv or server.environ is None:
        raise InvalidInput(
            f"pid {pid} on port {port} on {connection.name} cannot be read by launchdeck's account "
            f"(its command line or environment): only a server of that account can be adopted"
        )
    return server, address
