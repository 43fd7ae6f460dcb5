"""The dashboard's own files: templates, static files and migrations.

They sit beside `app/` in a checkout (the project's layout) and inside the package in a wheel
(pyproject maps the folders there), so an installed launchdeck needs no source tree."""

from importlib.resources import files
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[1]


def folder(name: str) -> Path:
    """The folder `name` ("templates", "static" or "migrations") on disk: jinja2, Starlette's
    static files and alembic read paths."""
    packaged = files("app") / name
    return Path(str(packaged)) if packaged.is_dir() else CHECKOUT / name
