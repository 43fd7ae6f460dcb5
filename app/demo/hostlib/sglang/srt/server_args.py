"""SGLang's server arguments as the simulated release parses and resolves them.

The rules follow the real releases' sources and are checked against the real packages resolved
on a CPU (tests/oracle). The API differs by release, as SGLang's does:
- 0.5.10: `prepare_server_args(argv)` returns resolved arguments; warnings print bare, because
  logging is not configured yet, and refusals raise from there.
- 0.5.23: `prepare_server_args(argv)` configures logging (`[YYYY-MM-DD HH:MM:SS] message`) and
  returns the arguments as given; `resolve_once()` applies the adjustments and validation, and
  `resolved_dict()` holds the effective values while the record keeps the input.
"""

from sglang.version import release

if release() == "0.5.10":
    from sglang.srt.server_args_0_5_10 import ServerArgs, prepare_server_args
else:
    from sglang.srt.server_args_0_5_23 import ServerArgs, prepare_server_args  # type: ignore[assignment]

__all__ = ["ServerArgs", "prepare_server_args"]
