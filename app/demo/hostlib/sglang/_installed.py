"""Compiles the simulated package under the path it would have if pip had installed it, so that
tracebacks and warnings in a simulated log name `.../dist-packages/sglang/...` as on a real host,
not wherever this simulator's checkout happens to live. Source lines still show in tracebacks:
linecache reads them through the loader."""

from __future__ import annotations

import linecache
import os
import sys
import traceback
from importlib.abc import MetaPathFinder
from importlib.machinery import ModuleSpec, PathFinder, SourceFileLoader
from types import CodeType

HOSTLIB = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
INSTALLED = f"/usr/local/lib/python{sys.version_info[0]}.{sys.version_info[1]}/dist-packages"


def installed_path(path: str) -> str:
    return INSTALLED + path[len(HOSTLIB) :] if path.startswith(HOSTLIB + os.sep) else path


class InstalledLoader(SourceFileLoader):
    def get_code(self, fullname: str) -> CodeType:
        path = self.get_filename(fullname)
        shown = installed_path(path)
        linecache.lazycache(shown, {"__name__": fullname, "__loader__": self})
        return compile(self.get_data(path), shown, "exec", dont_inherit=True)


class InstalledFinder(MetaPathFinder):
    def find_spec(self, fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        spec = PathFinder.find_spec(fullname, path)  # type: ignore[arg-type]
        if spec is None or not isinstance(spec.loader, SourceFileLoader) or not spec.origin:
            return None
        if installed_path(spec.origin) == spec.origin:
            return None
        spec.loader = InstalledLoader(fullname, spec.origin)
        return spec


def install() -> None:
    if not any(isinstance(finder, InstalledFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, InstalledFinder())
    # The interpreter's own hook reads source lines from the named file, which does not exist.
    sys.excepthook = traceback.print_exception
