"""`launchdeck` as a person runs it: `python -m app.cli` in a subprocess of its own, from the
checkout. run_cli runs a command to its end; cli does the same in an async test (whose event loop
may be serving the app the command talks to, see served.py). Commands that keep running (a
dashboard, a simulated host) are started with cli_argv by whoever owns them (faults.py)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import IO, Literal, overload

from tests.support.paths import ROOT

PIPE = subprocess.PIPE


def cli_argv(*args: str) -> list[str]:
    """The command line of `launchdeck ARGS...` run by this Python from the checkout."""
    return [sys.executable, "-m", "app.cli", *args]


def cli_env(env: Mapping[str, str] | None = None, *, unset: Iterable[str] = (), clean: bool = False) -> dict[str, str]:
    """This process's environment less the names in `unset`, plus `env`. `clean` also drops every
    LAUNCHDECK_ setting of the developer's and puts the checkout on PYTHONPATH (for a command that
    runs outside it)."""
    dropped = set(unset)
    values = {k: v for k, v in os.environ.items() if k not in dropped and not (clean and k.startswith("LAUNCHDECK_"))}
    if clean:
        values["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), values.get("PYTHONPATH")]))
    return values | dict(env or {})


@overload
def run_cli(
    *args: str,
    env: Mapping[str, str] | None = ...,
    unset: Iterable[str] = ...,
    cwd: Path = ...,
    timeout: float | None = ...,
    check: bool = ...,
    text: Literal[True] = ...,
    input: str | None = ...,
    stdout: int | IO[bytes] = ...,
    stderr: int | IO[bytes] = ...,
) -> subprocess.CompletedProcess[str]: ...


@overload
def run_cli(
    *args: str,
    env: Mapping[str, str] | None = ...,
    unset: Iterable[str] = ...,
    cwd: Path = ...,
    timeout: float | None = ...,
    check: bool = ...,
    text: Literal[False],
    input: bytes | None = ...,
    stdout: int | IO[bytes] = ...,
    stderr: int | IO[bytes] = ...,
) -> subprocess.CompletedProcess[bytes]: ...


def run_cli(
    *args: str,
    env: Mapping[str, str] | None = None,
    unset: Iterable[str] = (),
    cwd: Path = ROOT,
    timeout: float | None = None,
    check: bool = False,
    text: bool = True,
    input: str | bytes | None = None,
    stdout: int | IO[bytes] = PIPE,
    stderr: int | IO[bytes] = PIPE,
) -> subprocess.CompletedProcess[str] | subprocess.CompletedProcess[bytes]:
    """Runs `launchdeck ARGS...` to its end with `env` set over this environment (see cli_env);
    its output is captured (as text unless `text` is false) unless `stdout`/`stderr` say where.
    `input`, when given, is its standard input."""
    return subprocess.run(
        cli_argv(*args),
        cwd=cwd,
        env=cli_env(env, unset=unset),
        input=input,
        stdout=stdout,
        stderr=stderr,
        text=text,
        timeout=timeout,
        check=check,
    )


@overload
async def cli(
    *args: str,
    url: str | None = ...,
    env: Mapping[str, str] | None = ...,
    unset: Iterable[str] = ...,
    cwd: Path = ...,
    merge: bool = ...,
    text: Literal[True] = ...,
) -> tuple[int, str, str]: ...


@overload
async def cli(
    *args: str,
    url: str | None = ...,
    env: Mapping[str, str] | None = ...,
    unset: Iterable[str] = ...,
    cwd: Path = ...,
    merge: bool = ...,
    text: Literal[False],
) -> tuple[int, bytes, bytes]: ...


async def cli(
    *args: str,
    url: str | None = None,
    env: Mapping[str, str] | None = None,
    unset: Iterable[str] = (),
    cwd: Path = ROOT,
    merge: bool = False,
    text: bool = True,
) -> tuple[int, str, str] | tuple[int, bytes, bytes]:
    """Runs `launchdeck ARGS... [--url URL]` to its end without blocking the event loop; returns
    (exit status, stdout, stderr), decoded unless `text` is false. With `merge`, stderr goes into
    stdout (as a terminal shows them) and the stderr returned is empty."""
    process = await asyncio.create_subprocess_exec(
        *cli_argv(*args, *(["--url", url] if url is not None else [])),
        cwd=cwd,
        env=cli_env(env, unset=unset),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT if merge else asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode is not None
    err = err or b""
    if text:
        return process.returncode, out.decode(), err.decode()
    return process.returncode, out, err
