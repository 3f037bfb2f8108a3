"""The loop's network calls as the world reads them: arguments by name, ports, TLS contexts.

The seam receives each call as the loop got it (positional and keyword arguments, as the
stock method takes them on every supported Python); these signatures name them once.

Part of ``net``: may import ``shared``, ``clocks``, ``options``, ``engine``, ``trace`` (see
tests/layout.py).
"""

from __future__ import annotations

import socket
import ssl as _ssl
from collections.abc import Callable
from typing import Any, Final

from .._shared._errors import InvalidValueError

__all__ = [
    "ANY",
    "REAL",
    "bind",
    "create_connection_args",
    "create_server_args",
    "datagram_args",
    "getaddrinfo_args",
    "port_number",
    "start_tls_args",
    "tls_context",
    "unix_connection_args",
    "unix_server_args",
]

ANY: Final = frozenset({None, "", "0.0.0.0", "::"})
REAL: Final = frozenset({"127.0.0.1", "localhost", "::1"})

_Args = tuple[Any, ...]
_Kwargs = dict[str, Any]


def bind(signature: Callable[..., Any], args: _Args, kwargs: _Kwargs) -> dict[str, Any]:
    """The call's arguments by name, as the stock method would take them."""
    return dict(signature(*args, **kwargs))


def port_number(value: object) -> int:
    """A port as the stock methods take one: an int, digits, a service name, or None (0)."""
    if isinstance(value, bytes):
        value = value.decode()
    if isinstance(value, str) and not value.isdigit():
        try:
            return socket.getservbyname(value)
        except OSError:
            raise InvalidValueError(f"port: no service called {value!r}") from None
    if isinstance(value, str):
        value = int(value)
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidValueError(f"port must be an int or a service name, got {value!r}")
    if not 0 <= value <= 65535:
        raise InvalidValueError(f"port must be in 0-65535, got {value!r}")
    return value


def create_connection_args(
    protocol_factory: Any,
    host: Any = None,
    port: Any = None,
    *,
    ssl: Any = None,
    family: int = 0,
    proto: int = 0,
    flags: int = 0,
    sock: Any = None,
    local_addr: Any = None,
    server_hostname: Any = None,
    ssl_handshake_timeout: Any = None,
    ssl_shutdown_timeout: Any = None,
    happy_eyeballs_delay: Any = None,
    interleave: Any = None,
    all_errors: bool = False,
) -> Any:
    return locals().items()


def create_server_args(
    protocol_factory: Any,
    host: Any = None,
    port: Any = None,
    *,
    family: int = 0,
    flags: int = 0,
    sock: Any = None,
    backlog: int = 100,
    ssl: Any = None,
    reuse_address: Any = None,
    reuse_port: Any = None,
    keep_alive: Any = None,
    ssl_handshake_timeout: Any = None,
    ssl_shutdown_timeout: Any = None,
    start_serving: bool = True,
) -> Any:
    return locals().items()


def unix_connection_args(
    protocol_factory: Any,
    path: Any = None,
    *,
    ssl: Any = None,
    sock: Any = None,
    server_hostname: Any = None,
    ssl_handshake_timeout: Any = None,
    ssl_shutdown_timeout: Any = None,
) -> Any:
    return locals().items()


def unix_server_args(
    protocol_factory: Any,
    path: Any = None,
    *,
    sock: Any = None,
    backlog: int = 100,
    ssl: Any = None,
    ssl_handshake_timeout: Any = None,
    ssl_shutdown_timeout: Any = None,
    start_serving: bool = True,
    cleanup_socket: bool = True,
) -> Any:
    return locals().items()


def datagram_args(
    protocol_factory: Any,
    local_addr: Any = None,
    remote_addr: Any = None,
    *,
    family: int = 0,
    proto: int = 0,
    flags: int = 0,
    reuse_address: Any = None,
    reuse_port: Any = None,
    allow_broadcast: Any = None,
    sock: Any = None,
) -> Any:
    return locals().items()


def getaddrinfo_args(
    host: Any, port: Any, *, family: int = 0, type: int = 0, proto: int = 0, flags: int = 0
) -> Any:
    return locals().items()


def start_tls_args(
    transport: Any,
    protocol: Any,
    sslcontext: Any,
    *,
    server_side: bool = False,
    server_hostname: Any = None,
    ssl_handshake_timeout: Any = None,
    ssl_shutdown_timeout: Any = None,
) -> Any:
    return locals().items()


def tls_context(value: Any, server_side: bool) -> _ssl.SSLContext:
    if value is True:
        if server_side:
            raise InvalidValueError("a server needs an ssl.SSLContext, not ssl=True")
        return _ssl.create_default_context()
    if isinstance(value, _ssl.SSLContext):
        return value
    raise InvalidValueError(f"ssl must be an ssl.SSLContext or True, got {value!r}")
