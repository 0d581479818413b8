"""A real HTTP server for tests that receive POSTs (webhook receivers, gateway stand-ins).

``serve_posts(on_post)`` answers every POST with the status ``on_post(headers, body)`` returns (and an
empty body), on a free 127.0.0.1 port, in a daemon thread. Stop it with ``shutdown()`` then
``server_close()``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

OnPost = Callable[[Message, bytes], int]  # headers: case-insensitive, as received


def serve_posts(on_post: OnPost) -> ThreadingHTTPServer:
    class _Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            status = on_post(self.headers, body)
            self.send_response(status)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True).start()
    return server
