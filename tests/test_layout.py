"""The web layer's shape: routers stand side by side over shared modules, never on each other."""

from __future__ import annotations

import ast
from pathlib import Path

WEB = Path(__file__).resolve().parents[1] / "app" / "web"


def _defines_router(tree: ast.Module) -> bool:
    return any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "APIRouter"
        for node in ast.walk(tree)
    )


def _web_imports(tree: ast.Module) -> set[str]:
    """The app.web modules a module imports, by their file's stem."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "app.web":
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("app.web."):
            names.add(node.module.split(".")[2])
        elif isinstance(node, ast.Import):
            names.update(a.name.split(".")[2] for a in node.names if a.name.startswith("app.web."))
    return names


def test_no_router_module_imports_another() -> None:
    trees = {path.stem: ast.parse(path.read_text()) for path in WEB.glob("*.py")}
    routers = {name for name, tree in trees.items() if _defines_router(tree)}
    assert {"log_pages", "api_logs", "attempt_pages", "diagnosis_pages"} <= routers  # the check sees them
    crossing = {name: sorted(_web_imports(trees[name]) & routers) for name in sorted(routers)}
    assert {name: found for name, found in crossing.items() if found} == {}
