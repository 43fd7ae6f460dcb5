"""The client commands' side of the HTTP API: where the dashboard is, which token to send, and the
answers turned into LaunchdeckErrors. Nothing here depends on the working directory or on the
dashboard's own settings being valid: a laptop that only talks to a dashboard has neither."""

from __future__ import annotations

import os
import stat
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from app.errors import InvalidInput, LaunchdeckError

URL_VARIABLE = "LAUNCHDECK_URL"
TOKEN_VARIABLE = "LAUNCHDECK_TOKEN"


class ApiClient:
    """The dashboard at `url`, called with `token` as its bearer token."""

    def __init__(self, url: str, token: str):
        self.url = url.rstrip("/")
        self.http = httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=60)

    @classmethod
    def configured(cls, url: str | None = None, environ: Mapping[str, str] = os.environ) -> ApiClient:
        """The client as `find_url` and `find_token` say; InvalidInput when either cannot."""
        configured = read_client_file(client_file(environ))
        return cls(find_url(url, configured, environ), find_token(configured, environ))

    def close(self) -> None:
        self.http.close()

    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.request(method, path, **kwargs).json()

    def request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self.http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise LaunchdeckError(f"cannot reach the dashboard at {self.url}: {exc}") from None
        check(response)
        return response

    def events(self, path: str, *, last_event_id: str | None = None) -> Iterator[tuple[str, str, str]]:
        """Server-sent events as (event, id, data) until the server ends the stream."""
        headers = {"Last-Event-ID": last_event_id} if last_event_id else {}
        with self.http.stream("GET", path, headers=headers, timeout=httpx.Timeout(60, read=None)) as response:
            if response.status_code >= 400:
                response.read()
                check(response)
            event, event_id, data = "message", "", list[str]()
            for line in response.iter_lines():
                if not line:
                    if data:
                        yield event, event_id, "\n".join(data)
                    event, data = "message", []
                    continue
                field, _, value = line.partition(":")
                value = value.removeprefix(" ")
                if field == "event":
                    event = value
                elif field == "id":
                    event_id = value
                elif field == "data":
                    data.append(value)


def check(response: httpx.Response) -> None:
    """Raises the dashboard's own sentence (its `detail`) for an error answer."""
    if response.status_code >= 400:
        try:
            detail = response.json().get("detail", response.text)
        except ValueError:
            detail = response.text
        raise LaunchdeckError(f"{response.status_code}: {detail}")


def refusal(response: httpx.Response) -> dict[str, Any] | None:
    """A guard's refusal of a launch (409 or 422 with `guard`), else None."""
    if response.status_code not in (409, 422):
        return None
    try:
        answer = response.json()
    except ValueError:
        return None
    return answer if isinstance(answer, dict) and answer.get("guard") else None


def find_url(option: str | None, configured: Mapping[str, str], environ: Mapping[str, str]) -> str:
    """--url, else LAUNCHDECK_URL, else the client file's `url`, else the dashboard that
    LAUNCHDECK_BIND and LAUNCHDECK_PORT describe (a command run beside it; 127.0.0.1:8000 by default)."""
    for source, value in (
        ("--url", option),
        (URL_VARIABLE, environ.get(URL_VARIABLE)),
        (str(client_file(environ)), configured.get("url")),
    ):
        if value and value.strip():
            return _checked_url(value.strip(), source)
    bind = environ.get("LAUNCHDECK_BIND", "").strip() or "127.0.0.1"
    port = environ.get("LAUNCHDECK_PORT", "").strip() or "8000"
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise InvalidInput(f"LAUNCHDECK_PORT: {port!r} is no port; or name the dashboard with {URL_VARIABLE}")
    host = "127.0.0.1" if bind in ("0.0.0.0", "::") else bind
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


def _checked_url(url: str, source: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InvalidInput(f"{source}: {url!r} is not an http(s) URL, e.g. http://127.0.0.1:8000")
    return url


def find_token(configured: Mapping[str, str], environ: Mapping[str, str]) -> str:
    """LAUNCHDECK_TOKEN, else the client file's `token`, else the access token the dashboard wrote
    in LAUNCHDECK_DATA_DIR, where that is an absolute path (a command run on the dashboard's host)."""
    if token := environ.get(TOKEN_VARIABLE, "").strip() or configured.get("token"):
        return token
    where = f'set {TOKEN_VARIABLE}, or put `token = "..."` in {client_file(environ)}'
    data_dir = environ.get("LAUNCHDECK_DATA_DIR", "").strip()
    if not data_dir:
        raise InvalidInput(f"no token: {where}")
    if not Path(data_dir).is_absolute():
        raise InvalidInput(f"no token: {where} (LAUNCHDECK_DATA_DIR {data_dir!r} is relative, so it is not read)")
    path = Path(data_dir) / "access-token"
    try:
        return path.read_text().strip()
    except OSError as exc:
        raise InvalidInput(f"no token: {where} (cannot read {path}: {exc.strerror or exc})") from None


def client_file(environ: Mapping[str, str] = os.environ) -> Path:
    """$XDG_CONFIG_HOME/launchdeck/client.toml, ~/.config/… where that is unset or relative (as the
    XDG base directory specification says)."""
    base = environ.get("XDG_CONFIG_HOME", "")
    return (Path(base) if os.path.isabs(base) else Path.home() / ".config") / "launchdeck" / "client.toml"


def read_client_file(path: Path) -> dict[str, str]:
    """The `url` and `token` a person keeps for the command; {} when there is no file. A file that
    others may read is refused, as ssh refuses such a key: the token in it is as good as a password."""
    try:
        with path.open("rb") as file:
            mode = os.fstat(file.fileno()).st_mode
            if mode & 0o077:
                raise InvalidInput(
                    f"{path} may be read by other users (mode {stat.S_IMODE(mode):o}): "
                    f"`chmod 600 {path}`; it was not used"
                )
            values = tomllib.load(file)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise InvalidInput(f"cannot read {path}: {exc.strerror or exc}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InvalidInput(f"{path} is not TOML: {exc}") from None
    unknown = set(values) - {"url", "token"}
    if unknown or not all(isinstance(value, str) for value in values.values()):
        raise InvalidInput(f"{path} holds `url` and `token`, both strings, and nothing else")
    return {key: value.strip() for key, value in values.items()}
