"""The constant shell scripts run on the hosts, run here by the host's own /bin/sh where a detail of
the host (not the simulator) decides what they do."""

from __future__ import annotations

import os
import shutil
import subprocess

from app.launch import remote
from tests.support.strict import require

# A process group with a small id, as on a host that is a container: in a fresh PID namespace the
# first processes get ids 1, 2, 3...
LOW_GROUP = """
setsid sleep 30 &
while [ -z "$group" ]; do group=$(ps -o pgid= -C sleep | tr -d ' '); done
sh -c "$1" sh TERM "$group"; echo "signalled=$? group=$group"
sleep 0.2; ps -o pid= -g "$group" | grep -c . || true
"""


def test_a_process_group_with_a_small_id_is_stopped() -> None:
    """procps 4.0's kill (Debian 12) took `-- -73` for a usage error: such a stop did nothing."""
    require(os.geteuid() == 0 and shutil.which("unshare") is not None, "needs root and unshare for a PID namespace")
    run = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "sh", "-c", LOW_GROUP, "sh", remote.SIGNAL_GROUP],
        capture_output=True, text=True, timeout=20, check=True,
    )  # fmt: skip
    signalled, left = run.stdout.split("\n")[:2]
    assert signalled.startswith("signalled=0 group=") and int(signalled.rsplit("=", 1)[1]) < 100
    assert left == "0"
