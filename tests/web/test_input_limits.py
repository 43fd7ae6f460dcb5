"""Input limits: request bodies, field sizes, NUL bytes, 64-bit integers, and values on their way to a host."""

from __future__ import annotations

import json
import os
import types
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, Any, Union, get_args, get_origin

import pytest
from fastapi import FastAPI
from fastapi.dependencies.models import Dependant
from httpx import ASGITransport, AsyncClient
from pydantic import BaseModel

from app.demo.presets import seed_demo_presets
from app.launch import remote
from app.launch.preflight import run_preflight
from app.ssh import HostConnection, HostSpec
from app.web.params import INT64_MAX, INT64_MIN
from tests.support.dashboard import AUTH, started_app
from tests.support.paths import HOSTLIB
from tests.support.web import api_routes, log_in

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
LIMIT = 1 << 20
TOO_LARGE = "Input should be less than or equal to 9223372036854775807"


async def counted_body(size: int, pulled: list[int], chunk: int = 64 << 10) -> AsyncIterator[bytes]:
    """`size` bytes of a JSON string, noting how many the app asked for."""
    for _ in range(size // chunk):
        pulled.append(chunk)
        yield b"a" * chunk


@pytest.mark.parametrize("authenticated", [False, True], ids=["anonymous", "with-token"])
async def test_a_body_over_the_limit_is_refused_on_its_length_before_a_byte_is_read(
    app_client: AsyncClient, authenticated: bool
) -> None:
    pulled: list[int] = []
    headers = {"Content-Type": "application/json", "Content-Length": str(200 << 20), **(AUTH if authenticated else {})}
    response = await app_client.post("/api/presets", content=counted_body(200 << 20, pulled), headers=headers)
    assert response.status_code == 413
    assert response.json()["detail"] == (
        "the request body is larger than the limit of 1,048,576 bytes "
        "(the dashboard's LAUNCHDECK_MAX_BODY_BYTES setting)"
    )
    assert pulled == []


@pytest.mark.parametrize("authenticated", [False, True], ids=["anonymous", "with-token"])
async def test_a_chunked_body_is_refused_as_soon_as_it_passes_the_limit(
    app_client: AsyncClient, authenticated: bool
) -> None:
    pulled: list[int] = []
    headers = {"Content-Type": "application/json", **(AUTH if authenticated else {})}
    response = await app_client.post("/api/presets", content=counted_body(200 << 20, pulled), headers=headers)
    assert response.status_code == 413, response.text
    assert "larger than the limit of 1,048,576 bytes" in response.json()["detail"]
    assert LIMIT < sum(pulled) <= LIMIT + (64 << 10)


async def test_a_chunked_body_within_the_limit_reaches_the_route(api: AsyncClient) -> None:
    body = json.dumps({"name": "chunked", "model_path": MODEL, "description": "d" * 8000}).encode()

    async def chunks() -> AsyncIterator[bytes]:
        for start in range(0, len(body), 1000):
            yield body[start : start + 1000]

    response = await api.post("/api/presets", content=chunks(), headers={"Content-Type": "application/json"})
    assert response.status_code == 201, response.text
    anonymous = await api.post("/api/presets", content=chunks(), headers={"Authorization": ""})
    assert anonymous.status_code == 401


OVER = {
    "model_path": ({"model_path": "m" * 1025}, "model_path: 1,025 bytes is over the limit of 1,024"),
    "python": ({"python": "/" + "p" * 1024}, "python: 1,025 bytes is over the limit of 1,024"),
    "description": ({"description": "é" * 4097}, "description: 8,194 bytes is over the limit of 8,192"),
    "argument": ({"args": ["--served-model-name", "n" * 4097]}, "args: argument 2: 4,097 bytes is over the limit"),
    "all arguments": (
        {"args": [f"--flag-{i}={'v' * 4000}" for i in range(17)]},
        "args: 68,",
    ),
    "env value": ({"env": {"BIG": "v" * 16385}}, "env BIG: 16,385 bytes is over the limit of 16,384"),
    "all env values": ({"env": {f"V{i}": "v" * 15000 for i in range(5)}}, "env: 75,0"),
    "env name": ({"env": {"N" * 257: "1"}}, "env: 'NNNN"),
}
NUL = {
    "name": ({"name": "a\0b"}, "name: use 1-128 letters"),
    "model_path": ({"model_path": "meta\0llama"}, "model_path: contains a NUL byte"),
    "python": ({"python": "python3\0"}, "python: contains a NUL byte"),
    "description": ({"description": "a\0b"}, "description: contains a NUL byte"),
    "launcher": ({"launcher": "sglang serve\0"}, "launcher: choose"),
    "argument": ({"args": ["--served-model-name", "a\0b"]}, "args: argument 2: contains a NUL byte"),
    "env value": ({"env": {"A": "a\0b"}}, "env A: contains a NUL byte"),
    "env name": ({"env": {"A\0B": "1"}}, "env: 'A\\x00B' is not a valid variable name"),
}


@pytest.fixture(scope="module")
async def refusing_app(tmp_path_factory: pytest.TempPathFactory, sim_specs: list[HostSpec]) -> AsyncIterator[FastAPI]:
    """One app with the demo presets for the tables of refused presets below: a refusal writes
    nothing (each case checks that no preset "limits" appeared), so a case needs no app of its own."""
    async with started_app(tmp_path_factory.mktemp("limits"), sim_specs) as app:
        async with app.state.runtime.sessions.write() as session:
            await seed_demo_presets(session)
        yield app


@pytest.fixture
async def refusing_client(refusing_app: FastAPI) -> AsyncIterator[AsyncClient]:
    async with AsyncClient(transport=ASGITransport(app=refusing_app), base_url="http://testserver") as client:
        yield client


@pytest.mark.parametrize(
    ("fields", "message"), [*OVER.values(), *NUL.values()], ids=[*OVER, *(f"NUL {k}" for k in NUL)]
)
async def test_a_preset_field_over_its_limit_or_with_a_nul_is_refused_naming_it(
    refusing_client: AsyncClient, fields: dict[str, Any], message: str
) -> None:
    created = await refusing_client.post(
        "/api/presets", headers=AUTH, json={"name": "limits", "model_path": MODEL, **fields}
    )
    assert created.status_code == 422 and message in created.json()["detail"], created.text
    update = {"model_path": MODEL, **{k: v for k, v in fields.items() if k != "name"}}
    if "name" not in fields:
        edited = await refusing_client.put("/api/presets/llama31-8b", headers=AUTH, json=update)
        assert edited.status_code == 422 and message in edited.json()["detail"], edited.text
    assert (await refusing_client.get("/api/presets/limits", headers=AUTH)).status_code == 404


def form_of(fields: dict[str, Any]) -> dict[str, str]:
    """The editor's form for the same values: env as lines, arguments as the extra-arguments text."""
    form = {"name": "limits", "model_path": MODEL, **{k: v for k, v in fields.items() if k not in ("args", "env")}}
    form["env"] = "\n".join(f"{k}={v}" for k, v in fields.get("env", {}).items())
    form["extra_args"] = " ".join(fields.get("args", []))
    return form


@pytest.mark.parametrize(
    ("fields", "message"),
    [OVER["model_path"], OVER["description"], OVER["argument"], OVER["all arguments"], OVER["env value"],
     NUL["model_path"], NUL["python"], NUL["description"], NUL["argument"], NUL["env value"]],
    ids=["model_path", "description", "argument", "all arguments", "env value",
         "NUL model_path", "NUL python", "NUL description", "NUL argument", "NUL env value"],
)  # fmt: skip
async def test_the_preset_form_refuses_the_same_fields_and_keeps_what_was_typed(
    refusing_client: AsyncClient, fields: dict[str, Any], message: str
) -> None:
    csrf = await log_in(refusing_client)
    response = await refusing_client.post("/presets", data={**form_of(fields), "csrf_token": csrf})
    assert response.status_code == 422
    assert message.replace("'", "&#39;") in response.text
    assert (await refusing_client.get("/presets/limits")).status_code == 404


async def test_a_200_kb_argument_is_refused_and_the_host_stays_online(api: AsyncClient, running_app: FastAPI) -> None:
    huge = await api.post("/api/presets", json={"name": "huge", "model_path": MODEL, "args": ["--x", "a" * 200_000]})
    assert huge.status_code == 422 and huge.json()["detail"].startswith("args: argument 2: 200,000 bytes")
    check = await api.post("/api/preflight", json={"preset": "llama31-8b", "host": "rtxpro-01", "gpus": [0]})
    assert check.status_code == 200
    assert all(host.status.state == "online" for host in running_app.state.runtime.ssh)


async def test_a_preflight_with_60_kb_of_arguments_reaches_the_hosts_sglang_whole(
    api: AsyncClient, running_app: FastAPI
) -> None:
    args = [f"--launchdeck-probe-{i}={letter * 4000}" for i, letter in enumerate("abcdefghijklmno")]
    assert len("".join(args).encode()) > 60_000
    preset = {"name": "sixty", "model_path": MODEL, "args": args, "env": {"BIG": "b" * 16384}}
    assert (await api.post("/api/presets", json=preset)).status_code == 201
    check = await api.post("/api/preflight", json={"preset": "sixty", "host": "rtxpro-01", "gpus": [1]})
    assert check.status_code == 200, check.text
    by_name = {c["name"]: c for c in check.json()["checks"]}
    # The simulated SGLang knows none of these flags: its refusal quotes every byte it was given.
    refusal = "SGLang will refuse these arguments: sglang serve: error: unrecognized arguments: "
    assert by_name["arguments"]["message"] == refusal + " ".join(args)
    assert all(c["ok"] for name, c in by_name.items() if name != "arguments"), by_name
    assert running_app.state.runtime.ssh.get("rtxpro-01").status.state == "online"


async def test_a_preflight_of_values_stored_before_the_limits_keeps_the_host_online(running_app: FastAPI) -> None:
    """A revision saved before the limits existed may hold 200 KB values and a NUL: its preflight
    sends them on stdin, so the host only reports what its SGLang makes of them."""
    host = running_app.state.runtime.ssh.get("rtxpro-01")
    result = await run_preflight(
        host,
        gpus=[2],
        port=30000,
        python="python3",
        model_path="m" * 200_000,
        args=["--served-model-name", "a\0" * 100_000],
        env={"BIG": "b" * 200_000},
    )
    by_name = {check.name: check for check in result.checks}
    assert by_name["port"].ok and by_name["gpus"].ok
    assert by_name["memory"].message.startswith("model size unknown: ")
    assert host.status.state == "online"
    assert (await host.run(["true"])).exit_status == 0


async def test_a_preflight_step_that_takes_too_long_is_a_failed_check_naming_it(
    connect: Callable[..., HostConnection], sim_specs: list[HostSpec], tmp_path: Path
) -> None:
    slow = tmp_path / "slow-python"
    slow.write_text('#!/bin/sh\nsleep 30\nexec python3 "$@"\n')
    slow.chmod(0o755)
    host = connect(sim_specs[1])
    await host.wait_online(10)
    result = await run_preflight(
        host, gpus=[0], port=30000, python=str(slow), model_path=MODEL, args=[], env={}, step_timeout=1
    )
    by_name = {check.name: check for check in result.checks}
    assert by_name["port"].message == "the port check took longer than 1 s on the host"
    assert not by_name["port"].ok and result.blocked
    assert by_name["arguments"].message == "SGLang's argument parser took longer than 1 s on the host"
    assert by_name["gpus"].ok and by_name["processes"].ok
    assert host.status.state == "online"


@pytest.mark.openssh
async def test_the_host_check_reads_large_values_from_stdin_over_openssh(
    connect: Callable[..., HostConnection], openssh_spec: HostSpec
) -> None:
    """OpenSSH refuses a command line over 256 KB; the request travels on stdin, the preset's
    environment reaches the interpreter that imports SGLang (here the simulated one)."""
    host = connect(openssh_spec)
    await host.wait_online(10)
    name = "n" * 4000
    request = {
        "model_path": str(HOSTLIB.parent / "model_files" / "meta-llama--Llama-3.1-8B-Instruct"),
        "args": ["--port", "30000", *(f"--served-model-name={name}" for _ in range(16))],
        "env": {"PYTHONPATH": str(HOSTLIB), "BIG": "b" * 16384, "HOME": os.environ.get("HOME", "/root")},
    }
    answer = await host.run(["python3", "-c", remote.HOST_CHECK], input=json.dumps(request).encode())
    found = json.loads(answer.stdout.decode().splitlines()[-1])
    assert "error" not in found, found
    assert found["effective"]["served_model_name"] == name


async def test_the_launch_refuses_a_long_override_reason_and_names_with_nul(api: AsyncClient) -> None:
    body = {"preset": "llama31-8b", "host": "rtxpro-01", "gpus": [0], "override_reason": "r" * 4097}
    refused = await api.post("/api/attempts", json=body)
    assert refused.status_code == 422
    assert refused.json()["detail"] == "override_reason: 4,097 bytes is over the limit of 4,096"
    nul = await api.post("/api/preflight", json={"preset": "llama\0", "host": "rtxpro-01"})
    assert nul.status_code == 404 and nul.json()["detail"] == "no preset named 'llama\\x00'"
    address = await api.get("/api/attempts", params={"preset": "a\0b"})
    assert address.status_code == 422
    assert address.json()["detail"] == "the address contains a NUL byte (%00), which no name or value may hold"
    assert (await api.get("/api/presets/a%00b")).status_code == 422
    assert (await api.get("/api/grep", params={"q": "a\0b"})).status_code == 422  # no pattern holds one either
    assert (await api.get("/api/attempts")).json() == []


# Every integer a route takes, found from the app itself, so a new route cannot forget the limit.


def takes_int(annotation: Any) -> bool:
    origin = get_origin(annotation)
    if origin is Annotated:
        return takes_int(get_args(annotation)[0])
    if origin in (Union, types.UnionType, list):
        return any(takes_int(arg) for arg in get_args(annotation))
    return annotation is int


def is_list(annotation: Any) -> bool:
    return get_origin(annotation) is list or any(is_list(arg) for arg in get_args(annotation))


def placeholder(annotation: Any) -> Any:
    return 1 if takes_int(annotation) else [] if is_list(annotation) else "x"


def flattened(dependant: Dependant) -> Dependant:
    """The route's parameters with those of its dependencies (auth, CSRF, lookups)."""
    flat = Dependant(
        path_params=list(dependant.path_params),
        query_params=list(dependant.query_params),
        body_params=list(dependant.body_params),
    )
    for sub in dependant.dependencies:
        inner = flattened(sub)
        flat.path_params += inner.path_params
        flat.query_params += inner.query_params
        flat.body_params += inner.body_params
    return flat


def integer_requests(app: FastAPI, value: int) -> list[tuple[str, dict[str, Any]]]:
    """(parameter, request) for each integer parameter of each route, that parameter set to `value`
    and every other required one to a placeholder."""
    found = []
    for route in api_routes(app.routes):
        flat = flattened(route.dependant)
        path = {p.alias: placeholder(p.field_info.annotation) for p in flat.path_params}
        query = {p.alias: placeholder(p.field_info.annotation) for p in flat.query_params if p.field_info.is_required()}
        for method in sorted(route.methods - {"HEAD"}):

            def request(path_values: dict[str, Any], **extra: Any) -> dict[str, Any]:
                url = route.path_format.format(**path | path_values)  # noqa: B023 (called at once)
                return {"method": method, "url": url, "params": query, **extra}  # noqa: B023

            for param in flat.path_params + flat.query_params:
                if takes_int(param.field_info.annotation):
                    if param in flat.path_params:
                        found.append((param.alias, request({param.alias: value})))
                    else:
                        found.append((param.alias, request({}, params={**query, param.alias: value})))
            for body in flat.body_params:
                model = body.field_info.annotation
                if not (isinstance(model, type) and issubclass(model, BaseModel)):
                    continue
                fields = model.model_fields
                required = {n: placeholder(f.annotation) for n, f in fields.items() if f.is_required()}
                for name, field in fields.items():
                    if takes_int(field.annotation):
                        sent = [value] if is_list(field.annotation) else value
                        found.append((name, request({}, json={**required, name: sent})))
    return found


async def test_every_integer_parameter_of_every_route_refuses_numbers_beyond_64_bits(
    app_client: AsyncClient, running_app: FastAPI
) -> None:
    csrf = await log_in(app_client)
    requests = integer_requests(running_app, 2**64)
    assert len(requests) >= 40  # ids, offsets, limits, before, line, gpus, port, pid... in pages and the API
    wrong = []
    for name, request in requests:
        response = await app_client.request(**request, headers={**AUTH, "X-CSRF-Token": csrf})
        detail = response.json().get("detail", "") if response.status_code < 500 else ""
        # A route about an attempt loads it first: the placeholder attempt does not exist, which is
        # a 404 that the number never reached.
        missing = response.status_code == 404 and detail.startswith("no attempt") and f"/{2**64}" not in request["url"]
        if missing:
            continue
        if response.status_code != 422 or detail not in (f"{name}: {TOO_LARGE}", f"{name}.0: {TOO_LARGE}"):
            wrong.append(f"{request}: {response.status_code} {response.text[:300]}")
    for value in (INT64_MAX, INT64_MIN):  # the largest numbers accepted are never a 500 either
        for _name, request in integer_requests(running_app, value):
            response = await app_client.request(**request, headers={**AUTH, "X-CSRF-Token": csrf})
            if response.status_code >= 500:
                wrong.append(f"{request}: {response.status_code} {response.text[:300]}")
    assert not wrong, "\n".join(wrong)
