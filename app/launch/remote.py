"""What runs on the host for an attempt: its launch script, and the fixed commands that start and
inspect it.

The launch script is rendered here with every value shell-quoted. The commands that start,
probe and stop it are constant scripts that receive paths and pids as positional arguments,
so no user value is ever spliced into shell text.
"""

from __future__ import annotations

import secrets
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

ATTEMPTS_DIR = ".launchdeck/attempts"  # relative to the SSH user's home
LOG_NAME = "server.log"
SCRIPT_NAME = "launch.sh"


def attempt_dir(attempt_id: int) -> str:
    """Unique even across dashboards and databases that share a host account."""
    return f"{ATTEMPTS_DIR}/{attempt_id}-{secrets.token_hex(4)}"


def render_script(*, attempt_id: int, directory: str, argv: Sequence[str], env: Mapping[str, str]) -> str:
    """A /bin/sh script that records its pid and start time, runs the server with its output in
    the attempt's log, and writes the server's exit status when it ends."""
    q = shlex.quote
    lines = [
        "#!/bin/sh",
        f"# launchdeck attempt {attempt_id}",
        f"cd {q(directory)} || exit 1",
        # pid and start time (field 22 of /proc/<pid>/stat), so a reused pid is never taken for ours.
        'stat=$(cat /proc/$$/stat); set -- ${stat##*) }; shift 19; echo "$$ $1" > pid.tmp && mv pid.tmp pid',
        # Outlive a SIGTERM to the group just long enough to record how the server ended.
        "trap true HUP INT TERM",
        *(f"export {name}={q(value)}" for name, value in env.items()),
        # Appending: whoever else writes to the log (a tool, a person) cannot clobber the server's lines.
        f"{shlex.join(argv)} >> {LOG_NAME} 2>&1 < /dev/null",
        "echo $? > exit_code.tmp && mv exit_code.tmp exit_code",
        "",
    ]
    return "\n".join(lines)


# $1: the script. Starts it in a new session (its own process group) and prints its pid.
START = 'setsid sh "$1" > /dev/null 2>&1 < /dev/null & echo $!'

# $1: attempt directory, $2: pid or empty, $3: start time or empty.
# Prints key=value lines: whether that process is still the one we started, its exit status
# once written, the pid file, the log's size and the group's live processes.
PROBE = r"""
cd "$1" 2>/dev/null || { echo "missing=1"; exit 0; }
pid=$2 start=$3 alive=0
if [ -r pid ]; then
  read -r file_pid file_start < pid
  if [ -z "$pid" ] || { [ "$file_pid" = "$pid" ] && [ -z "$start" ]; }; then pid=$file_pid start=$file_start; fi
fi
if [ -n "$pid" ] && [ -r "/proc/$pid/stat" ]; then
  stat=$(cat "/proc/$pid/stat" 2>/dev/null); set -- ${stat##*) }; state=$1; shift 19
  # Until the script has written its start time, any live process with the pid counts.
  if [ "$state" != Z ] && { [ -z "$start" ] || [ "$1" = "$start" ]; }; then alive=1; fi
fi
echo "pid=$pid"
echo "start=$start"
echo "alive=$alive"
echo "exit=$(cat exit_code 2>/dev/null)"
echo "log=$(wc -c < server.log 2>/dev/null || echo 0)"
if [ -n "$pid" ]; then echo "group=$(ps -o stat= -g "$pid" 2>/dev/null | grep -vc '^Z')"; fi
"""

# $1: pid. Prints the process's working directory and its process group, or exits 1.
PROCESS_ORIGIN = 'cwd=$(readlink "/proc/$1/cwd") && pgid=$(ps -o pgid= -p "$1") && echo "$cwd" $pgid'

# $1: signal name, $2: process group id. Exits 0 when a process got the signal. The shell's own
# kill: procps 4.0's (Debian 12) takes a group below 100 after `--` for a usage error, and such
# small ids are the rule where the host is a container.
SIGNAL_GROUP = 'kill -s "$1" -- "-$2" 2>/dev/null'

# $1: signal name, $2: pid, $3: its start time. Exits 0 when that very process (not a later one
# with its pid) got the signal: for an adopted server that does not lead its process group, whose
# group is someone else's.
SIGNAL_PROCESS = r"""
stat=$(cat "/proc/$2/stat" 2>/dev/null) || exit 1
sig=$1 pid=$2 start=$3
set -- ${stat##*) }; state=$1; shift 19
[ "$state" != Z ] && [ "$1" = "$start" ] && kill -s "$sig" "$pid" 2>/dev/null
"""

# $1: a TCP port. Prints `me=UID` (this account), a `socket=INODE UID ADDRESS` line per socket
# listening on the port (from /proc/net/tcp and tcp6: the socket's owner, its local address in
# the kernel's hex) and a `pid=PID PPID` line per process this account can see holding one.
# Where no process is found for a socket, its owner is another account.
LISTENERS = r"""
port=$(printf '%04X' "$1")
echo "me=$(id -u)"
sockets=$(awk -v port="$port" '$4 == "0A" { split($2, a, ":"); if (a[2] == port) print $10, $8, a[1] }' \
  /proc/net/tcp /proc/net/tcp6 2>/dev/null)
[ -n "$sockets" ] || exit 0
echo "$sockets" | sed 's/^/socket=/'
for inode in $(echo "$sockets" | cut -d' ' -f1); do
  find /proc/[0-9]*/fd -maxdepth 1 -lname "socket:\[$inode\]" 2>/dev/null
done | cut -d/ -f3 | sort -un | while read -r pid; do
  stat=$(cat "/proc/$pid/stat" 2>/dev/null) || continue
  set -- ${stat##*) }
  echo "pid=$pid $2"
done
"""

# $1: pid. What launchdeck keeps of a server it adopts, as key=value lines: its stat line, owner,
# argv and environment (NUL-separated, so base64), working directory, where its stdout and stderr
# go (for a regular file: its device:inode and size, and the device:inode its path names now), its
# descendants (the processes whose GPUs are its) and the boot time and clock ticks its start time
# counts from. `gone=1` when it has exited.
PROCESS_DETAILS = r"""
cd "/proc/$1" 2>/dev/null || { echo "gone=1"; exit 0; }
echo "stat=$(base64 -w0 < stat)"
echo "uid=$(stat -c %u .) $(stat -c %U .)"
echo "clock=$(awk '/^btime/ { print $2 }' /proc/stat) $(getconf CLK_TCK 2>/dev/null)"
echo "cmdline=$(base64 -w0 < cmdline)"
if environ=$(base64 -w0 2>/dev/null < environ); then echo "environ=$environ"; fi
echo "cwd=$(readlink -n cwd 2>/dev/null | base64 -w0)"
for fd in 1 2; do
  echo "fd$fd=$(readlink -n "fd/$fd" 2>/dev/null | base64 -w0)"
  if [ -f "fd/$fd" ]; then
    echo "file$fd=$(stat -L -c '%d:%i %s' "fd/$fd")"
    echo "path$fd=$(stat -L -c '%d:%i' -- "$(readlink "fd/$fd")" 2>/dev/null)"
  fi
done
echo "tree=$(ps -e -o pid= -o ppid= | awk -v root="$1" '{ parent[$1] = $2 } END {
  for (p in parent) { q = p; while ((q in parent) && q != root) q = parent[q]; if (q == root) printf "%s ", p } }')"
"""

# $1: the adopted attempt's directory, $2: the server's pid, $3: its start time, $4: its log ("" for
# none). The directory a launched attempt has, for the same probe and log mirror: its pid file, and
# server.log a link to the file the server writes.
RECORD_ADOPTED = 'mkdir -p "$1" && cd "$1" && echo "$2 $3" > pid && { [ -z "$4" ] || ln -s -- "$4" server.log; }'


@dataclass(frozen=True)
class ProbeResult:
    missing: bool
    pid: int | None
    start_time: int | None
    alive: bool
    exit_code: int | None
    log_size: int
    group_size: int

    @classmethod
    def parse(cls, text: str) -> ProbeResult:
        values = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)

        def number(key: str) -> int | None:
            value = values.get(key, "").strip()
            return int(value) if value.lstrip("-").isdigit() else None

        return cls(
            missing=values.get("missing") == "1",
            pid=number("pid"),
            start_time=number("start"),
            alive=values.get("alive") == "1",
            exit_code=number("exit"),
            log_size=number("log") or 0,
            group_size=number("group") or 0,
        )


# The check proper, in a Python that has the preset's environment: the model's weight size from its
# safetensors index and its shape from its config.json, the SGLang version, and SGLang's own argument
# handling, whose effective values and warnings predict the launch. Standard library only; it works
# wherever sglang is installed.
# Before 0.5.23 `prepare_server_args` returns resolved arguments; from then on it returns them as
# parsed, and `resolve_once()` adjusts and validates them (effective values from `resolved_dict()`).
# Then `check_server_args()`, which the engine runs before it starts anything (a chunk that is not
# a whole number of pages, a tensor-parallel size the nodes cannot share), so that its refusal is
# foreseen here as argparse's is.
# Newer releases log warnings as "[YYYY-MM-DD HH:MM:SS] message", some in colour: both are stripped.
_CHECK = r"""
import contextlib, dataclasses, io, json, os, re, sys, warnings
warnings.simplefilter("ignore")  # Python's own warnings (of torch, transformers) are not SGLang's
request = json.load(sys.stdin)
model_path, args = request["model_path"], [request["model_path"], *request["args"]]
result = {}
def said(captured):
    noise = re.compile(r"\x1b\[[0-9;]*m|^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d[^\]]*\] ")
    return [noise.sub("", line).strip() for line in captured.getvalue().splitlines() if line.strip()]
def snapshot(path):
    if os.path.isdir(path):
        return path
    hub = os.environ.get("HF_HUB_CACHE") or os.path.join(
        os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface"), "hub")
    folder = os.path.join(hub, "models--" + path.replace("/", "--"))
    with open(os.path.join(folder, "refs", "main")) as f:
        return os.path.join(folder, "snapshots", f.read().strip())
try:
    with open(os.path.join(snapshot(model_path), "model.safetensors.index.json")) as f:
        result["weight_bytes"] = int(json.load(f)["metadata"]["total_size"])
except Exception as exc:
    result["weight_error"] = f"{type(exc).__name__}: {exc}"
try:  # the model's shape, which sizes its KV cache
    with open(os.path.join(snapshot(model_path), "config.json")) as f:
        result["model_config"] = json.load(f)
except Exception as exc:
    result["config_error"] = f"{type(exc).__name__}: {exc}"
try:  # the installed package's own word, for when importing it fails
    from importlib.metadata import version
    result["version"] = version("sglang")
except Exception:
    pass
captured = io.StringIO()
try:
    with contextlib.redirect_stderr(captured):
        import sglang
        result["version"] = str(getattr(sglang, "__version__", "") or result.get("version", ""))
        from sglang.srt.server_args import prepare_server_args
        server_args = prepare_server_args(["--model-path", *args])
        if callable(getattr(server_args, "resolve_once", None)):
            server_args.resolve_once()
        if callable(getattr(server_args, "check_server_args", None)):
            server_args.check_server_args()
    if callable(getattr(server_args, "resolved_dict", None)):
        values = server_args.resolved_dict()
    else:
        values = dataclasses.asdict(server_args)
    result["effective"] = {k: v for k, v in values.items() if isinstance(v, (str, int, float, bool, type(None), dict))}
except SystemExit:
    result["error"] = (said(captured) or ["argument error"])[-1]
except BaseException as exc:
    name = type(exc).__qualname__
    module = type(exc).__module__
    result["error"] = f"{name if module == 'builtins' else module + '.' + name}: {exc}".splitlines()[0]
result["warnings"] = said(captured)
print(json.dumps(result, default=str))
"""

# Runs on the host with the preset's Python; reads {"model_path", "args", "env"} as JSON on stdin,
# as values of any size cannot travel on a command line (one SSH packet). The check itself runs in a
# child with the preset's environment, as the launch script exports it: PYTHONPATH or
# LD_LIBRARY_PATH count only when set before the interpreter starts.
HOST_CHECK = (
    "import json, os, subprocess, sys\n"
    "request = sys.stdin.buffer.read()\n"
    "env = {**os.environ, **json.loads(request)['env']}\n"
    f"sys.exit(subprocess.run([sys.executable, '-c', {_CHECK!r}], input=request, env=env).returncode)\n"
)

# $1: port. Exits 0 if nothing listens on it on the host's loopback; else prints why, and on a
# second line the next port up that is free (if one of the next 1000 is), and exits 1.
PORT_FREE = (
    "import socket, sys\n"
    "def bind(port):\n"
    "    with socket.socket() as s:\n"
    "        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
    "        s.bind(('127.0.0.1', port))\n"
    "port = int(sys.argv[1])\n"
    "try:\n"
    "    bind(port)\n"
    "except OSError as exc:\n"
    "    print(exc.strerror)\n"
    "    for other in range(port + 1, min(port + 1001, 65536)):\n"
    "        try:\n"
    "            bind(other)\n"
    "        except OSError:\n"
    "            continue\n"
    "        print(other)\n"
    "        break\n"
    "    sys.exit(1)\n"
)
