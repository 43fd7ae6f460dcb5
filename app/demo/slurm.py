"""A real Slurm cluster on this machine, whose nodes are simulated GPU hosts.

Debian's slurm-wlm runs here as it would on a cluster: munged, slurmctld, and one `slurmd -N
<node>` per node, all on this machine and all in one folder: the munge key and socket, slurm.conf
and gres.conf, the controller's saved state, the daemons' logs and pid files. Nothing is read from
or written to /etc, and every port is picked free, so several clusters (tests and a demo) run at
once. Commands reach a cluster through the environment it gives (`environment()`: SLURM_CONF).

Configuration choices, each for a reason this machine gives:
- proctrack/linuxproc and task/none: no cgroup plugin, so nothing depends on systemd or on the
  cgroup layout of the machine (a container here);
- SlurmdParameters=config_overrides: the nodes declare the CPUs of a GPU server, not this machine's;
- GPUs in gres.conf are character devices (major 195, as NVIDIA's) made in the cluster's folder:
  Slurm drains a node whose GPUs have no device files, and with them a job gets
  CUDA_VISIBLE_DEVICES indexing its node's GPUs;
- batch_sched_delay=0,sched_min_interval=0: a job starts as soon as it can, not on the next pass;
- no slurmdbd: finished jobs are written by jobcomp/filetxt, which `sacct -c` reads;
- KillWait=1: a cancelled or timed-out job ends within a second or two;
- SlurmdTimeout=30: a node whose slurmd died is marked not responding within about 10 s and down
  after 30 s (the default, 300 s, is too long for a test; less risks nodes marked down on a
  machine busy running tests);
- JobRequeue=0: a job on a node that fails ends as NODE_FAIL instead of starting over elsewhere,
  so what the dashboard shows does not depend on a site's requeue policy (`sbatch --requeue`
  asks for it).

A job on node K is a process on simulated host K: a TaskProlog exports that host's environment
(PATH, PYTHONPATH, GPU state file..., as its SSH sessions get it from SimHost.environment), so the
simulated nvidia-smi, pynvml and sglang in a job see the node's own GPUs, and the Python programs
on that PATH run in the node's own network namespace (see `_enter_network`). HOME, USER and the
language come from the submitting login node, as on a cluster whose home directories are shared.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import json
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from app.demo.cluster import ensure_gpu_state
from app.demo.inventory import SimHostSpec
from app.demo.model_catalogue import install_models
from app.demo.netns import NetworkNamespace
from app.demo.sshserver import SimHost, kill_marked
from app.ssh.hostkeys import generate_key_file
from app.ssh.hosts import HostSpec, render_hosts

log = logging.getLogger(__name__)

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENT_COMMANDS = ("sbatch", "squeue", "scancel", "sinfo", "sacct", "scontrol", "srun")
SBIN = ("/usr/sbin", "/sbin", "/usr/bin", "/bin")
# What a job keeps of the login node's environment rather than take its node's: a shared home.
LOGIN_VARIABLES = ("HOME", "USER", "LOGNAME", "SHELL", "LANG")
NVIDIA_MAJOR = 195
UNIX_SOCKET_MAX = 107
START_TIMEOUT = 30.0


class SlurmError(Exception):
    """The local cluster did not start or stop as asked; says what its logs say."""


def missing_programs() -> list[str]:
    """The Slurm and munge programs not on the PATH (packages slurm-wlm and munge)."""
    return [name for name in (*DAEMONS, *CLIENT_COMMANDS) if shutil.which(name) is None]


def unavailable() -> str | None:
    """Why no local cluster can run here, in a sentence; None when one can."""
    if missing := missing_programs():
        return (
            "a local Slurm cluster needs Debian's slurm-wlm and munge packages, and the PATH lacks"
            f" {', '.join(missing)} (apt-get install slurm-wlm munge)"
        )
    if os.geteuid() != 0:
        return "a local Slurm cluster runs its daemons as root (slurmd starts jobs as their owners); run as root"
    return None


def gres_type(spec: SimHostSpec) -> str:
    """The GPU type as Slurm names it in gres (`gpu:rtxpro6000:4`): the model without dashes."""
    return spec.gpu_model.replace("-", "")


@dataclass
class LocalSlurm:
    """A cluster in `root` whose nodes are `nodes`, in `partitions` (name: node names; the first is
    the default; default one partition "gpu" of every node)."""

    root: Path
    nodes: Sequence[SimHostSpec]
    partitions: Mapping[str, Sequence[str]] = field(default_factory=dict)
    time_scale: float = 1.0
    cluster_name: str = "launchdeck"
    _processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    _ports: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.root = self.root.resolve()
        self.partitions = dict(self.partitions) or {"gpu": [spec.name for spec in self.nodes]}
        self.hosts = {
            spec.name: SimHost(
                spec.name, self.root / "nodes" / spec.name, time_scale=self.time_scale, nvml=spec.nvml, python=True
            )
            for spec in self.nodes
        }

    @property
    def conf_path(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.root / "munge" / "socket"

    @property
    def jobcomp_path(self) -> Path:
        return self.root / "jobcomp.txt"

    def environment(self) -> dict[str, str]:
        """What a client command needs to talk to this cluster."""
        return {"SLURM_CONF": str(self.conf_path)}

    def log_path(self, daemon: str) -> Path:
        return self.root / "log" / f"{daemon}.log"

    def start(self) -> None:
        """Writes the configuration, starts munged, the controller and every node's slurmd, and
        returns once every node is idle. Daemons left by an earlier run in this folder are ended."""
        if len(str(self.munge_socket)) > UNIX_SOCKET_MAX:
            raise SlurmError(f"{self.root} is too long a path for the munge socket in it; choose a shorter folder")
        self.stop()
        for name in ("etc", "munge", "state", "spool", "log", "run"):
            (self.root / name).mkdir(parents=True, exist_ok=True, mode=0o700)
        self._prepare_nodes()
        self._write_munge_key()
        self._pick_ports()
        self._write_config()
        self._start_munged()
        self._start_controller()
        for spec in self.nodes:
            self.start_node(spec.name)
        self.wait_idle()

    def stop(self) -> None:
        """Ends the daemons, the jobs' steps and processes, whoever started them: everything whose
        environment names this cluster's configuration."""
        if "slurmctld" in self._processes:
            self._stop_daemon("slurmctld")  # saves its state; a slurmd would wait for its jobs' steps
        kill_marked(f"SLURM_CONF={self.conf_path}".encode())
        for host in self.hosts.values():
            host.kill_detached()
            if host.network is not None:
                host.network.close()
                host.network = None
        for process in self._processes.values():
            process.kill()
            process.wait()
        self._processes.clear()

    def restart_controller(self) -> None:
        """Stops slurmctld (which saves its state) and starts it again: running jobs go on.

        Returns once every node has registered with the new controller (a few seconds): until then
        Slurm 22.05 has not loaded its GPU plugin and starts a job on a node it recovered as
        partly busy without the GPUs it asked for, whose steps are then refused ("Invalid generic
        resource (gres) specification")."""
        self._stop_daemon("slurmctld")
        self._start_controller()
        self._until(self._every_node_registered, "every node registered with the restarted slurmctld")

    def _every_node_registered(self) -> bool:
        result = self.run("scontrol", "--oneliner", "show", "node", check=False)
        nodes = [line for line in result.stdout.splitlines() if line.startswith("NodeName=")]
        return len(nodes) == len(self.nodes) and not any("SlurmdStartTime=None" in line for line in nodes)

    def kill_node(self, name: str) -> None:
        """Kills the node's slurmd at once, as a node that dies; its jobs' processes stay."""
        self._stop_daemon(f"slurmd-{name}", signal.SIGKILL)

    def start_node(self, name: str) -> None:
        self._spawn(f"slurmd-{name}", ["slurmd", "-D", "-N", name, "-f", str(self.conf_path)])

    def run(self, *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Runs a client command (sinfo, scontrol...) against this cluster."""
        return subprocess.run(
            argv, env={**os.environ, **self.environment()}, capture_output=True, text=True, check=check, timeout=30
        )

    def wait_idle(self, timeout: float = START_TIMEOUT) -> None:
        """Returns once every node is idle (no job, responding)."""
        deadline = time.monotonic() + timeout
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            self._check_running()
            result = self.run("sinfo", "--noheader", "--Node", "--format=%N %T", check=False)
            states = dict(line.split() for line in result.stdout.splitlines() if line.strip())
            if len(states) == len(self.nodes) and all(state == "idle" for state in states.values()):
                return
            time.sleep(0.05)
        raise SlurmError(f"Slurm nodes not idle after {timeout:g} s: {states or 'no answer'}{self._log_tails()}")

    def _prepare_nodes(self) -> None:
        """Each node's simulated host (its python3 and GPU state; the models are in the shared home),
        its GPU device files, and what the TaskProlog exports in a job on it."""
        for spec in self.nodes:
            host = self.hosts[spec.name]
            host.prepare(authorized_key="")
            ensure_gpu_state(host, spec)
            devices = self._device_dir(spec.name)
            devices.mkdir(parents=True, exist_ok=True)
            for index in range(spec.gpu_count):
                device = devices / f"nvidia{index}"
                if not device.is_char_device():
                    device.unlink(missing_ok=True)
                    os.mknod(device, 0o600 | 0o020000, os.makedev(NVIDIA_MAJOR, index))
            self._enter_network(host)
            exports = {name: value for name, value in host.environment().items() if name not in LOGIN_VARIABLES}
            if any("\n" in value for value in exports.values()):
                raise SlurmError(f"node {spec.name}: a line break in its environment")
            (host.root / "task-environment").write_text("".join(f"export {k}={v}\n" for k, v in exports.items()))
        prolog = self.root / "etc" / "task-prolog"
        nodes = shlex.quote(str(self.root / "nodes"))
        prolog.write_text(f'#!/bin/sh\nexec cat {nodes}/"$SLURMD_NODENAME"/task-environment\n')
        prolog.chmod(0o755)

    def _enter_network(self, host: SimHost) -> None:
        """Gives the node a loopback of its own, as each simulated SSH host has: the programs on its
        PATH (python3 and so the simulated sglang, nvidia-smi and any probe) run inside it, so two
        nodes' servers can listen on the same port. Slurm's daemons and the job's shell stay on
        this machine's loopback, where the controller is; where no namespace can be made, the
        nodes share that loopback."""
        try:
            host.network = host.network or NetworkNamespace.held_by(
                host.root / "network.pid", {"PATH": os.pathsep.join(SBIN), **self.environment()}
            )
        except OSError as exc:
            log.warning("Slurm node %s shares this machine's loopback: %s", host.name, exc)
            return
        keeper = int((host.root / "network.pid").read_text())
        outside = host.root / "bin-outside"
        outside.mkdir(exist_ok=True)
        for program in os.scandir(host.bin_dir):
            if program.name.endswith(".inside"):
                continue
            os.replace(program.path, outside / program.name)
            wrapper = host.bin_dir / f"{program.name}.inside"
            target = shlex.quote(str(outside / program.name))
            wrapper.write_text(f'#!/bin/sh\nexec nsenter --net=/proc/{keeper}/ns/net -- {target} "$@"\n')
            wrapper.chmod(0o755)
            os.replace(wrapper, program.path)

    def _device_dir(self, node: str) -> Path:
        return self.root / "dev" / node

    def _write_munge_key(self) -> None:
        key = self.root / "munge" / "munge.key"
        if not key.exists():
            key.write_bytes(os.urandom(1024))
        key.chmod(0o400)

    def _pick_ports(self) -> None:
        names = ["slurmctld", *(spec.name for spec in self.nodes)]
        with contextlib.ExitStack() as stack:
            sockets = [stack.enter_context(socket.socket()) for _ in names]
            for sock in sockets:
                sock.bind(("127.0.0.1", 0))
            self._ports = {name: sock.getsockname()[1] for name, sock in zip(names, sockets, strict=True)}

    def _write_config(self) -> None:
        hostname = socket.gethostname().split(".")[0]
        root = self.root
        lines = [
            f"ClusterName={self.cluster_name}",
            f"SlurmctldHost={hostname}(127.0.0.1)",
            f"SlurmctldPort={self._ports['slurmctld']}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}/%n",
            f"SlurmctldPidFile={root / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'run'}/slurmd-%n.pid",
            f"SlurmctldLogFile={self.log_path('slurmctld')}",
            f"SlurmdLogFile={root / 'log'}/slurmd-%n.log",
            f"PlugStackConfig={root / 'etc' / 'plugstack.conf'}",
            f"TaskProlog={root / 'etc' / 'task-prolog'}",
            f"JobCompLoc={self.jobcomp_path}",
            "JobCompType=jobcomp/filetxt",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "MpiDefault=none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "GresTypes=gpu",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0",
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            "KillWait=1",
            "SlurmdTimeout=30",
            "JobRequeue=0",
            "MailProg=/bin/true",
            "InactiveLimit=0",
            "MinJobAge=300",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
        ]
        gres = []
        for spec in self.nodes:
            cpus = 16 * max(spec.gpu_count, 1)
            node = (
                f"NodeName={spec.name} NodeHostname={hostname} NodeAddr=127.0.0.1 Port={self._ports[spec.name]}"
                f" CPUs={cpus} RealMemory={cpus * 8192} State=UNKNOWN"
            )
            if spec.gpu_count:
                node += f" Gres=gpu:{gres_type(spec)}:{spec.gpu_count}"
                files = f"{self._device_dir(spec.name)}/nvidia[0-{spec.gpu_count - 1}]"
                gres.append(f"NodeName={spec.name} Name=gpu Type={gres_type(spec)} File={files}")
            lines.append(node)
        for position, (partition, members) in enumerate(self.partitions.items()):
            default = "YES" if position == 0 else "NO"
            lines.append(
                f"PartitionName={partition} Nodes={','.join(members)} Default={default} MaxTime=INFINITE State=UP"
            )
        self.conf_path.write_text("\n".join(lines) + "\n")
        (self.root / "etc" / "gres.conf").write_text("".join(f"{line}\n" for line in gres))
        (self.root / "etc" / "plugstack.conf").write_text("")

    def _start_munged(self) -> None:
        munge = self.root / "munge"
        self.munge_socket.unlink(missing_ok=True)
        self._spawn(
            "munged",
            [
                "munged",
                "--foreground",
                "--force",
                f"--socket={self.munge_socket}",
                f"--key-file={munge / 'munge.key'}",
                f"--pid-file={munge / 'munged.pid'}",
                f"--seed-file={munge / 'munged.seed'}",
                f"--log-file={self.log_path('munged')}",
            ],
        )
        self._until(self.munge_socket.exists, "munged's socket is there")

    def _start_controller(self) -> None:
        self._spawn("slurmctld", ["slurmctld", "-D", "-f", str(self.conf_path)])
        self._until(lambda: self.run("scontrol", "ping", check=False).stdout.count("is UP") > 0, "slurmctld answers")

    def _spawn(self, name: str, argv: list[str]) -> None:
        program = shutil.which(argv[0])
        if program is None:
            raise SlurmError(f"{argv[0]} is not on the PATH (apt-get install slurm-wlm munge)")
        with open(self.root / "log" / f"{name}.out", "ab") as output:
            self._processes[name] = subprocess.Popen(
                [program, *argv[1:]],
                env={"PATH": os.pathsep.join(SBIN), "LANG": "C.UTF-8", **self.environment()},
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _stop_daemon(self, name: str, signum: int = signal.SIGTERM) -> None:
        process = self._processes.pop(name, None)
        if process is None:
            raise SlurmError(f"{name} is not running")
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signum)
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def _until(self, check: object, what: str) -> None:
        assert callable(check)
        deadline = time.monotonic() + START_TIMEOUT
        while not check():
            self._check_running()
            if time.monotonic() > deadline:
                raise SlurmError(f"{what}: not within {START_TIMEOUT:g} s{self._log_tails()}")
            time.sleep(0.05)

    def _check_running(self) -> None:
        for name, process in self._processes.items():
            if process.poll() is not None:
                raise SlurmError(f"{name} exited with status {process.returncode}{self._log_tails()}")

    def _log_tails(self) -> str:
        tails = []
        for log in sorted((self.root / "log").glob("*")):
            lines = log.read_text(errors="replace").splitlines()[-5:]
            if lines:
                tails.append(f"\n{log.name}:\n  " + "\n  ".join(lines))
        return "".join(tails)


@dataclass
class LoginHost(SimHost):
    """A simulated host whose commands talk to a Slurm cluster: the login node. It shares this
    machine's loopback (the controller listens there), and its home is the jobs' home."""

    slurm: dict[str, str] = field(default_factory=dict)

    def environment(self) -> dict[str, str]:
        return {**super().environment(), **self.slurm}


class SlurmSite:
    """A Slurm cluster and its login node, as a dashboard reaches a cluster: over SSH to the login
    node, whose commands (sbatch, squeue...) talk to the cluster. Lives in `root`: the cluster, the
    login host, and the client key and known_hosts to reach it."""

    def __init__(
        self,
        root: Path,
        name: str,
        nodes: Sequence[SimHostSpec],
        partitions: Mapping[str, Sequence[str]] | None = None,
        *,
        time_scale: float = 1.0,
    ):
        self.root = root.resolve()
        self.name = name
        self.slurm = LocalSlurm(self.root / "cluster", nodes, partitions or {}, time_scale=time_scale)
        self.login = LoginHost(
            name, self.root / "login", time_scale=time_scale, isolated=False, slurm=self.slurm.environment()
        )

    @property
    def client_key_path(self) -> Path:
        return self.root / "client_ed25519_key"

    @property
    def known_hosts_path(self) -> Path:
        return self.root / "known_hosts"

    @property
    def output_dir(self) -> str:
        """Where the jobs' output goes: the login node's home, which the nodes share."""
        return str(self.login.home / "slurm-jobs")

    async def start(self, port: int = 0) -> HostSpec:
        """Starts the cluster and the login node's SSH server (on `port`, or a free one)."""
        await asyncio.to_thread(self.slurm.start)
        try:
            if not self.client_key_path.exists():
                generate_key_file(self.client_key_path, comment="launchdeck-slurm")
            self.login.prepare(authorized_key=Path(f"{self.client_key_path}.pub").read_text())
            install_models(self.login.home)
            ensure_gpu_state(self.login, SimHostSpec(self.name, self.slurm.nodes[0].gpu_model, 0))
            await self.login.start(port=port)
        except BaseException:
            await asyncio.to_thread(self.slurm.stop)
            raise
        self.known_hosts_path.write_text(f"[127.0.0.1]:{self.login.port} {self.login.public_host_key()}\n")
        return self.login_spec()

    async def stop(self) -> None:
        await self.login.stop()
        await asyncio.to_thread(self.slurm.stop)

    def login_spec(self) -> HostSpec:
        """How the login node is reached over SSH."""
        return HostSpec(
            name=self.name,
            address="127.0.0.1",
            port=self.login.port,
            user=getpass.getuser(),
            labels=tuple(sorted({spec.gpu_model for spec in self.slurm.nodes})),
            identity_files=(str(self.client_key_path),),
            known_hosts=str(self.known_hosts_path),
        )

    def hosts_entry(self, partition: str | None = None) -> str:
        """The hosts-file table of this cluster (kind "slurm"), for jobs in `partition` (default the
        first); GPUs per node are those of the partition's first node."""
        partition = partition or next(iter(self.slurm.partitions))
        first = self.slurm.partitions[partition][0]
        gpus = next(spec.gpu_count for spec in self.slurm.nodes if spec.name == first)
        settings = {"kind": "slurm", "partition": partition, "gpus_per_node": gpus, "output_dir": self.output_dir}
        lines = [f"{key} = {json.dumps(value)}" for key, value in settings.items()]
        return render_hosts([self.login_spec()]) + "".join(f"{line}\n" for line in lines)

    def write_hosts_file(self, ssh_hosts_file: Path) -> Path:
        """A hosts file of the SSH hosts in `ssh_hosts_file` and this cluster, beside the cluster."""
        path = self.root / "hosts.toml"
        path.write_text(f"{ssh_hosts_file.read_text()}\n{self.hosts_entry()}")
        return path


DEMO_NODES = (SimHostSpec("rtxnode-01", "rtx-pro-6000", 4), SimHostSpec("rtxnode-02", "rtx-pro-6000", 4))


def demo_site(root: Path, time_scale: float) -> SlurmSite:
    """The demo's cluster "slurm-rtxpro": two nodes of 4 RTX PRO 6000s in partition "rtxpro"."""
    return SlurmSite(
        root, "slurm-rtxpro", DEMO_NODES, {"rtxpro": [spec.name for spec in DEMO_NODES]}, time_scale=time_scale
    )
