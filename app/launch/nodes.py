"""Which nodes a launch runs on and what each runs: a preset asks for N nodes with SGLang's own
`--nnodes N`; each node runs the preset's command with its `--node-rank` and the address where
node 0 waits for the others (`--dist-init-addr host:port`).

Node 0's address is its host's address as the dashboard reaches it over SSH (the hosts file's
`address`, else its name): the nodes must reach each other the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

from app.errors import InvalidInput
from app.ssh import HostConnection, HostState

# Where node 0 waits for the other nodes unless the launch names a port (checked free on node 0).
DEFAULT_DIST_PORT = 20000
OPTIONS_WITH_VALUE = ("--nnodes", "--node-rank", "--dist-init-addr")


def option_value(args: Sequence[str], names: Sequence[str]) -> str | None:
    """The value of the last of `names` in `args` (as `--name value` or `--name=value`)."""
    found = None
    for i, arg in enumerate(args):
        option, has_value, value = arg.partition("=")
        if option in names:
            found = value if has_value else (args[i + 1] if i + 1 < len(args) else "")
    return found


def nnodes_of(args: Sequence[str]) -> int:
    """How many nodes the arguments ask for; 1 unless `--nnodes N` says more."""
    value = option_value(args, ("--nnodes",))
    if value is None:
        return 1
    if not value.isdigit() or int(value) < 1:
        raise InvalidInput(f"--nnodes: {value!r} is not a number of nodes")
    return int(value)


def without_options(args: Sequence[str], names: Sequence[str]) -> list[str]:
    kept: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
            continue
        option, has_value, _ = arg.partition("=")
        if option in names:
            skip = not has_value
            continue
        kept.append(arg)
    return kept


def node_argv(argv: Sequence[str], *, nnodes: int, node_rank: int, dist_init_addr: str) -> list[str]:
    """The command one node runs: the preset's, with its rank and node 0's address."""
    rest = without_options(argv, OPTIONS_WITH_VALUE)
    return [*rest, "--nnodes", str(nnodes), "--node-rank", str(node_rank), "--dist-init-addr", dist_init_addr]


def address_of(connection: HostConnection) -> str:
    return connection.spec.address or connection.spec.name


def pick_hosts(connections: Sequence[HostConnection], label: str, count: int) -> list[str]:
    """`count` hosts with the label, online ones first, by name."""
    labelled = sorted(
        (c for c in connections if label in c.spec.labels),
        key=lambda c: (c.status.state != HostState.ONLINE, c.name),
    )
    if len(labelled) < count:
        raise InvalidInput(f"label {label!r}: {len(labelled)} host(s) have it; the preset asks for {count} nodes")
    return [c.name for c in labelled[:count]]
