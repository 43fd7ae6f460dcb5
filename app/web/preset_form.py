"""The preset editor's form, read and filled: shared by the preset pages and "edit and relaunch"."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from app.db.models import Preset
from app.errors import InvalidInput
from app.presets import revisions


def parse_env(text: str) -> dict[str, str]:
    """KEY=VALUE, one per line; blank lines ignored."""
    env = {}
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        name, equals, value = line.partition("=")
        if not equals:
            raise InvalidInput(f"env: line {number} ({line.strip()!r}) is not NAME=VALUE")
        env[name.strip()] = value
    return env


async def preset_input(request: Request, name: str) -> revisions.PresetInput:
    form = await request.form()
    values = {key: str(value) for key, value in form.items()}
    try:
        port = int(values.get("port") or 30000)
    except ValueError:
        raise InvalidInput(f"port: {values.get('port')!r} is not a whole number") from None
    return revisions.PresetInput(
        name=name,
        description=values.get("description", ""),
        webhook_url=values.get("webhook_url", ""),
        model_path=values.get("model_path", ""),
        launcher=values.get("launcher", revisions.LAUNCHERS[0]),
        python=values.get("python", "python3"),
        port=port,
        env=parse_env(values.get("env", "")),
        args=revisions.args_from_form(values, values.get("extra_args", "")),
    )


def editor_context(data: revisions.PresetInput | None, error: str | None = None) -> dict[str, Any]:
    if data is None:  # a new preset: the server's figures on, as every release launchdeck knows serves them
        data = revisions.PresetInput(name="", model_path="", args=["--enable-metrics"])
    fields, extra = revisions.form_from_args(data.args)
    return {
        "data": data,
        "fields": fields,
        "extra_args": extra,
        "env_text": "\n".join(f"{k}={v}" for k, v in data.env.items()),
        "flags": revisions.FLAGS,
        "launchers": revisions.LAUNCHERS,
        "error": error,
    }


def input_of(preset: Preset) -> revisions.PresetInput:
    return revisions.PresetInput(
        name=preset.name,
        description=preset.description,
        webhook_url=preset.webhook_url,
        **revisions.revision_fields(revisions.latest(preset)),
    )
