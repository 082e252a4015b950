"""The service served inside the test process: the ASGI application with its lifespan, no socket.

`InProcessServer` has the surface of tests/conftest.py's `Server` that the API
tests use (`url`, `api`, `client()`, `log()`), so a module moves between the two
by the fixture it asks for. The application is `fairmatch.main.create_app` with
settings read from the same FAIRMATCH_* variables a real server is given; its
lifespan (database check, background loops) runs on an event loop in a thread
of its own for as long as the server is open, as in a uvicorn worker, and every
request is handed to that loop. What uvicorn itself does (sockets, HTTP parsing,
signals, workers) is tested against real servers only.
"""

from __future__ import annotations

import contextlib
import logging
import os
import traceback
from collections.abc import Iterator
from pathlib import Path

import anyio.from_thread
import httpx

from fairmatch.main import create_app
from fairmatch.settings import Settings

log = logging.getLogger("fairmatch")


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    """Exactly these FAIRMATCH_* variables while the settings are read."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("FAIRMATCH_")}
    for name in saved:
        del os.environ[name]
    os.environ.update(env)
    try:
        yield
    finally:
        for name in env:
            os.environ.pop(name, None)
        os.environ.update(saved)


def settings_of(config: Path, database_url: str, **settings: str) -> Settings:
    """The settings a real server started with these FAIRMATCH_* overrides would read."""
    env = {
        "FAIRMATCH_CONFIG": str(config),
        "FAIRMATCH_DATABASE_URL": database_url,
        **{f"FAIRMATCH_{k.upper()}": str(v) for k, v in settings.items()},
    }
    with _environment(env):
        return Settings()


class _LoopTransport(httpx.BaseTransport):
    """Hands each request to the application on the server's event loop. An exception that
    escapes the application is what uvicorn makes of it: a logged traceback and a bare 500."""

    def __init__(self, server: InProcessServer) -> None:
        self._server = server
        self._asgi = httpx.ASGITransport(app=server.app)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.read()  # a body the event loop can stream
        status, headers, body = self._server.portal.call(self._exchange, request)
        return httpx.Response(status, headers=headers, stream=httpx.ByteStream(body), request=request)

    async def _exchange(self, request: httpx.Request) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        try:
            response = await self._asgi.handle_async_request(request)
        except Exception:
            self._server.write_log("Exception in ASGI application\n" + traceback.format_exc())
            return 500, [(b"content-type", b"text/plain; charset=utf-8")], b"Internal Server Error"
        body = b"".join([part async for part in response.aiter_raw()])  # as sent: the client decodes
        return response.status_code, response.headers.raw, body


class InProcessServer:
    """The application of `settings`, started (lifespan included) on construction; `stop()` ends it."""

    url = "http://fairmatch.in-process"

    def __init__(self, settings: Settings, log_path: Path) -> None:
        self.log_path = log_path
        self._log_handler = logging.FileHandler(log_path)
        self._log_handler.setLevel(logging.WARNING)  # what a server's stderr shows
        log.addHandler(self._log_handler)
        self._stack = contextlib.ExitStack()
        try:
            self.app = create_app(settings)
            self.portal = self._stack.enter_context(anyio.from_thread.start_blocking_portal())
            self._stack.enter_context(
                self.portal.wrap_async_context_manager(self.app.router.lifespan_context(self.app))
            )
        except BaseException:
            self.stop()
            raise

    @property
    def api(self) -> str:
        return f"{self.url}/api/v1"

    def client(self, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=self.api, transport=_LoopTransport(self), **kwargs)

    def write_log(self, text: str) -> None:
        with self.log_path.open("a") as out:
            out.write(text)

    def log(self) -> str:
        self._log_handler.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        try:
            self._stack.close()
        finally:
            log.removeHandler(self._log_handler)
            self._log_handler.close()
