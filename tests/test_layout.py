"""The house's shape: packages form layers, each importing only the ones below it, and routers
stand side by side over shared modules, never on each other."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[1] / "app"

# Each unit of app/ (a package, or a module at the top) and its layer: a unit may import units of a
# lower layer only, so no arrow runs up and no two units import each other. The one table of it.
LAYERS: dict[str, int] = {
    "errors": 0,
    "clock": 0,
    "states": 0,
    "credentials": 0,
    "resources": 0,
    "backoff": 0,
    "logging_setup": 0,
    "diagnose": 1,  # pure functions over text
    "disk": 1,
    "db": 2,
    "config": 3,
    "audit": 3,
    "ssh": 3,
    "leases": 3,  # which controller owns which host (PostgreSQL leases, fencing)
    "host_calls": 4,  # the work on a host, asked of the controller that owns it
    "accounts": 4,
    "logs": 4,
    "slurm": 4,
    "presets": 4,
    "gpu": 5,  # reads GPUs wherever they are: NVML over SSH, nvidia-smi, Slurm partitions
    "host_views": 6,  # each host as its owner sees it, for the other processes
    "casebook": 5,
    "launch": 6,
    "perf": 7,
    "demo": 8,
    "metrics": 8,  # reads the services the runtime composes
    "runtime": 9,  # the composition root
    "web": 10,
    "cli": 11,
}
# Code that runs on the simulated hosts, not in the dashboard: it imports nothing of app/.
HOST_SIDE = APP / "demo" / "hostlib"


def _unit(module: str) -> str | None:
    """The LAYERS unit an `app.…` module name belongs to."""
    parts = module.split(".")
    return parts[1] if parts[0] == "app" and len(parts) > 1 else None


def _imported_modules(path: Path) -> set[str]:
    """Every app module a file imports, at the top or inside a function: `from app.x import y`
    counts as app.x.y where y is a module, else as app.x."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                module = f"{node.module}.{alias.name}"
                is_module = (APP.parent / Path(*module.split("."))).with_suffix(".py").exists() or (
                    APP.parent / Path(*module.split("."))
                ).is_dir()
                names.add(module if is_module else node.module)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return {name for name in names if name == "app" or name.startswith("app.")}


def _dashboard_files() -> list[Path]:
    return [path for path in sorted(APP.rglob("*.py")) if HOST_SIDE not in path.parents]


def _unit_of_file(path: Path) -> str:
    return path.relative_to(APP).parts[0].removesuffix(".py")


def test_every_unit_has_a_layer() -> None:
    units = {_unit_of_file(path) for path in _dashboard_files()} - {"__init__"}
    assert units == set(LAYERS)


@pytest.mark.parametrize("path", _dashboard_files(), ids=lambda path: str(path.relative_to(APP)))
def test_imports_only_lower_layers(path: Path) -> None:
    here = _unit_of_file(path)
    if here == "__init__":
        return
    upward = sorted(
        module
        for module in _imported_modules(path)
        if (unit := _unit(module)) is not None and unit != here and LAYERS[unit] >= LAYERS[here]
    )
    assert upward == [], f"{here} (layer {LAYERS[here]}) imports from its own layer or above"


def test_host_side_code_imports_nothing_of_the_dashboard() -> None:
    found = {str(path.relative_to(APP)): _imported_modules(path) for path in sorted(HOST_SIDE.rglob("*.py"))}
    assert {name: modules for name, modules in found.items() if modules} == {}


def test_the_check_sees_an_upward_import(tmp_path: Path) -> None:
    written = tmp_path / "x.py"
    written.write_text("from app.web import deps\nfrom app.launch.attempts import AttemptService\n")
    assert _imported_modules(written) == {"app.web.deps", "app.launch.attempts"}


ROUTER_FOLDERS = (APP / "web" / "api", APP / "web" / "pages")


def _defines_router(tree: ast.Module) -> bool:
    return any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "APIRouter"
        for node in ast.walk(tree)
    )


def test_no_router_module_imports_another() -> None:
    """Each router folder's __init__ gathers its routers; no other router module imports one."""
    routers = {
        f"app.web.{folder.name}.{path.stem}"
        for folder in ROUTER_FOLDERS
        for path in folder.glob("*.py")
        if path.stem != "__init__" and _defines_router(ast.parse(path.read_text()))
    }
    assert {"app.web.pages.logs", "app.web.api.logs", "app.web.pages.attempts"} <= routers  # the check sees them
    crossing = {
        str(path.relative_to(APP)): sorted(_imported_modules(path) & routers)
        for path in sorted((APP / "web").rglob("*.py"))
        if path.stem != "__init__"
    }
    assert {name: found for name, found in crossing.items() if found} == {}
