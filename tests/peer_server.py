"""A small HTTP server for the outside-world tests: run in a thread, or as its own process.

``GET /ms/N`` answers ``ok N`` after N real milliseconds (the peer's own work); ``GET /never``
never answers (the connection stays open until the client gives up).  HTTP/1.1 keep-alive.

As a process: ``python peer_server.py`` binds 127.0.0.1 on a free port, prints the port on
stdout, and serves until its stdin closes.
"""

from __future__ import annotations

import http.server
import sys
import threading
import time


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path == "/never":
            self.rfile.read()  # until the client closes: no answer, ever
            return
        delay_ms = int(self.path.rsplit("/", 1)[-1]) if self.path.startswith("/ms/") else 0
        time.sleep(delay_ms / 1000)  # real-time: the peer's own work
        body = f"ok {delay_ms}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # many short connections in a row: keep the backlog deep
    block_on_close = False


def start_in_thread() -> tuple[Server, threading.Thread]:
    server = Server(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return server, thread


def main() -> None:
    server, _ = start_in_thread()
    print(server.server_address[1], flush=True)
    sys.stdin.read()  # the parent closes our stdin to stop us
    server.shutdown()


if __name__ == "__main__":
    main()
