"""htmx and its SSE extension for static/vendor/<package>@<version>/: the dist/*.js files of each
front-end package package.json pins, fetched from the npm registry and checked against
package-lock.json's integrity hash. Python's standard library only, so that neither the wheel nor
the image needs Node.js.

Two ways in, one code: `make install` runs it as a script; the wheel's build (hatchling, see
pyproject.toml) runs it as a build hook when static/vendor lacks a pinned package, so that
`pip install .` from a fresh clone carries htmx. NPM_CONFIG_REGISTRY picks another registry."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import sys
import tarfile
import urllib.request
from pathlib import Path
from typing import Any

try:
    from hatchling.builders.hooks.plugin.interface import BuildHookInterface
except ImportError:  # run as a script, outside a build
    BuildHookInterface = object  # type: ignore[assignment,misc]


def missing(root: Path) -> list[str]:
    """The pinned packages static/vendor lacks, as <package>@<version>."""
    pins = json.loads((root / "package.json").read_text())["dependencies"]
    wanted = [f"{name}@{version}" for name, version in pins.items()]
    return [folder for folder in wanted if not any((root / "static" / "vendor" / folder).glob("*.js"))]


def fetch(root: Path) -> None:
    registry = os.environ.get("NPM_CONFIG_REGISTRY", "https://registry.npmjs.org").rstrip("/")
    pins = json.loads((root / "package.json").read_text())["dependencies"]
    locked = json.loads((root / "package-lock.json").read_text())["packages"]
    vendor = root / "static" / "vendor"
    shutil.rmtree(vendor, ignore_errors=True)
    for name, version in pins.items():
        entry = locked[f"node_modules/{name}"]
        if entry["version"] != version:
            sys.exit(f"vendor_frontend: package-lock.json has {name} {entry['version']}, package.json pins {version}")
        url = f"{registry}/{name}/-/{name.rsplit('/', 1)[-1]}-{version}.tgz"
        with urllib.request.urlopen(url, timeout=60) as response:
            tarball = response.read()
        algorithm, expected = entry["integrity"].split("-", 1)
        if base64.b64encode(hashlib.new(algorithm, tarball).digest()).decode() != expected:
            sys.exit(f"vendor_frontend: {url} does not match package-lock.json's {algorithm} integrity")
        target = vendor / f"{name}@{version}"
        target.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(tarball)) as archive:
            for member in archive.getmembers():
                folder, _, file_name = member.name.rpartition("/")
                if member.isfile() and folder == "package/dist" and file_name.endswith(".js"):
                    extracted = archive.extractfile(member)
                    assert extracted is not None
                    (target / file_name).write_bytes(extracted.read())
        print(f"static/vendor/{target.name}: {len(list(target.iterdir()))} files", file=sys.stderr)


class VendorFrontend(BuildHookInterface):  # type: ignore[misc,valid-type]
    """hatchling's hook: fills static/vendor before the wheel takes it, where it is incomplete."""

    PLUGIN_NAME = "custom"

    def initialize(self, version: str, build_data: dict[str, Any]) -> None:
        root = Path(self.root)
        if missing(root):
            fetch(root)


if __name__ == "__main__":
    fetch(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
