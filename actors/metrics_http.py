"""A Prometheus text endpoint for a node's counters (``--metrics-port``)."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


def render(counters: dict[str, int]) -> str:
    """``name|label=value`` counters as Prometheus text, all prefixed ``actorlog_``."""
    lines = []
    for key in sorted(counters):
        name, _, labels = key.partition("|")
        label_text = ""
        if labels:
            pairs = [kv.split("=", 1) for kv in labels.split(",")]
            label_text = "{" + ",".join(f'{k}="{v}"' for k, v in pairs) + "}"
        lines.append(f"actorlog_{name}{label_text} {counters[key]}")
    return "\n".join(lines) + "\n"


def serve_metrics(host: str, port: int, snapshot: Any) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path not in ("/metrics", "/"):
                self.send_error(404)
                return
            body = render(snapshot()).encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: Any) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True).start()
    return server
