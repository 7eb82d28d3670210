"""Who may reach ``composer serve`` and how long a connection may hold a socket.

``Guard`` checks each request's ``Host`` against an allow-list (a browser page on another site that
rebinds its name to 127.0.0.1 still sends its own name: DNS rebinding cannot spend the LLM budget) and,
when a token is set, its ``Authorization: Bearer`` header; ``/health`` needs no token, so load balancers
and uptime checks need no secret.

uvicorn closes an idle keep-alive connection only after a response: a client that connects and sends
nothing, or half a request head, holds its socket (and a file descriptor) for ever. ``guarded_protocol``
gives every connection a deadline to send its whole request, counted from when it connects or gets its
previous response, and caps the open connections: past the cap the connection that has waited longest
without a request is closed, else the new one gets a 503.
"""

from __future__ import annotations

import asyncio
import hmac
import resource
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

import h11
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.protocols.http.h11_impl import H11Protocol

if TYPE_CHECKING:
    import uvicorn

LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
"""The ``Host`` names a loopback bind answers by default (any port)."""
OPEN_PATHS = frozenset({"/health"})
"""Paths answered without the token."""


@dataclass(frozen=True)
class Access:
    """Who may call the service (each a ``composer serve`` option)."""

    token: str | None = None
    """--token-env: the bearer token every request but ``/health`` must carry (None: no token)."""
    allowed_hosts: tuple[str, ...] | None = None
    """--allowed-host: the ``Host`` names answered, ports ignored; ``*`` any (None: any)."""


@dataclass(frozen=True)
class Connections:
    """How long and how many connections may stay open (each a ``composer serve`` option)."""

    request_timeout_s: float = 10.0
    """--request-timeout: seconds to send a whole request, from connecting or the previous response."""
    keep_alive_s: int = 5
    """--keep-alive: seconds an idle connection stays open after a response."""
    max_connections: int | None = None
    """--max-connections: open connections at most (None: ``default_max_connections()``)."""


def default_max_connections() -> int:
    """1,000, or half the open-file limit where that is lower: the server's own files (indexes, caches,
    the LLM's sockets) keep room, and a flood of connections never makes accept() fail."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1000 if soft == resource.RLIM_INFINITY else max(1, min(1000, soft // 2))


def host_name(header: str) -> str:
    """The name in a ``Host`` header or an allow-list entry, its port dropped: ``[::1]:8000`` -> ``::1``."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1:].split("]", 1)[0]
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


class Guard:
    """Refuse a request whose ``Host`` is not allowed (421) or that lacks the token (401), each with a
    one-line JSON ``detail``, before the body is read."""

    def __init__(self, app: ASGIApp, access: Access) -> None:
        self.app = app
        hosts = access.allowed_hosts
        self.hosts = None if hosts is None or "*" in hosts else frozenset(map(host_name, hosts))
        self.bearer = None if access.token is None else f"Bearer {access.token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        refusal = self.refusal(scope)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        status, detail = refusal
        extra = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        await JSONResponse({"detail": detail}, status_code=status, headers=extra)(scope, receive, send)

    def refusal(self, scope: Scope) -> tuple[int, str] | None:
        """(status, detail) for a request that may not be answered, None for one that may."""
        headers = dict(scope["headers"])
        if self.hosts is not None:
            host = headers.get(b"host", b"").decode("latin-1")
            if host_name(host) not in self.hosts:
                return 421, (f"Host {host!r} is not served here: allowed {', '.join(sorted(self.hosts))} "
                             "(--allowed-host)")
        if self.bearer is not None and scope["path"] not in OPEN_PATHS:
            given = headers.get(b"authorization", b"")
            if not hmac.compare_digest(given, self.bearer):
                return 401, "missing or wrong token: send 'Authorization: Bearer <token>' (--token-env)"
        return None


def guarded_protocol(limits: Connections) -> type[H11Protocol]:
    """uvicorn's h11 protocol with ``limits``' request deadline and connection cap (see the module)."""
    cap = limits.max_connections or default_max_connections()

    class Guarded(H11Protocol):
        deadline_s: ClassVar[float] = limits.request_timeout_s
        max_open: ClassVar[int] = cap

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            self._deadline: asyncio.TimerHandle | None = None
            self._since = time.monotonic()
            if len(self.connections) > self.max_open and not self._evict():
                self._refuse()
                return
            self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self.conn.their_state not in (h11.IDLE, h11.SEND_BODY):
                self._disarm()  # the whole request is in: the pipeline may take its time

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing():
                self._since = time.monotonic()
                self._arm()

        @property
        def waiting(self) -> bool:
            """Open with no request being answered: connected, idle, or sending its request's head."""
            return self.conn.their_state is h11.IDLE and not self.transport.is_closing()

        def _arm(self) -> None:
            self._disarm()
            self._deadline = self.loop.call_later(self.deadline_s, self._expire)

        def _disarm(self) -> None:
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _expire(self) -> None:
            self._deadline = None
            if self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not self.transport.is_closing():
                self.transport.close()

        def _evict(self) -> bool:
            """Close the connection that has waited longest without a request; False when none waits."""
            waiting = [c for c in self.connections if c is not self and isinstance(c, Guarded) and c.waiting]
            if not waiting:
                return False
            oldest = min(waiting, key=lambda c: c._since)
            oldest.transport.close()
            return True

        def _refuse(self) -> None:
            body = b'{"detail":"too many open connections (--max-connections): try again"}'
            self.transport.write(b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                                 b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body))
            self.transport.close()

    return Guarded


def server(app: Any, host: str, port: int, limits: Connections) -> uvicorn.Server:
    """The uvicorn server for ``app`` on ``host:port`` with ``limits`` (not started)."""
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False,
                            timeout_keep_alive=limits.keep_alive_s, http=guarded_protocol(limits))
    return uvicorn.Server(config)
