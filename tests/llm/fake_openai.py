"""A scripted OpenAI-compatible chat server on 127.0.0.1 for tests and demos (no network beyond loopback).

Implements `POST /v1/chat/completions` (non-streaming, with `usage`) and `GET /v1/models`.
Behaviour is chosen per instance (`mode`):

  fixed          every call answers `reply` (e.g. a correct kernel file in a ```python block)
  sequence       answers `replies` in order; the last one repeats
  refuse         a polite refusal with no code block and no JSON
  invalid_json   prose with a broken JSON object
  truncated      an unterminated ```python block, finish_reason "length"
  error500       HTTP 500 on every call
  rate_limit_once  HTTP 429 with `Retry-After: <retry_after>` on the first call, then like `fixed`
  hang           sleeps `hang_s` before answering (to trip the client's timeout)
  callable       `handler(request_body) -> str` builds the reply text

`reject_response_format=True` answers HTTP 400 to any request carrying `response_format` (a server
without structured-output support). Every request body (and its Authorization header) is kept in
`requests` / `auth_headers` for assertions.

As a context manager::

    with FakeOpenAI(mode="fixed", reply=text) as srv:
        ChatOpenAI(base_url=srv.base_url, api_key="test", ...)

As a script (the CLI tests and README use it)::

    python tests/llm/fake_openai.py --mode fixed --reply-file kernel.md --port 8765
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODES = (
    "fixed",
    "sequence",
    "refuse",
    "invalid_json",
    "truncated",
    "error500",
    "rate_limit_once",
    "hang",
    "callable",
)

REFUSAL = "I'm sorry, but I can't help with writing that code. Is there anything else I can do for you?"
INVALID_JSON = 'Here is my analysis: {"bottleneck": "memory", "evidence": ["low bandwidth", plan: unfinished'
TRUNCATED = (
    "I will fuse the two operations into one kernel.\n\n```python\nimport torch\nimport triton\n"
    "import triton.language as tl\n\n@triton.jit\ndef kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):\n"
    "    pid = tl.program_id(0)\n    offs = pid * BLOCK + tl.arange(0, BLOCK)\n"
)


def _approx_tokens(text: str) -> int:
    return max(1, len(text) // 4)


class FakeOpenAI:
    def __init__(
        self,
        mode: str = "fixed",
        *,
        reply: str = "",
        replies: list[str] | None = None,
        handler: Callable[[dict[str, Any]], str] | None = None,
        retry_after: float = 1.0,
        hang_s: float = 30.0,
        reject_response_format: bool = False,
        port: int = 0,
    ):
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; choose from {', '.join(MODES)}")
        if mode == "callable" and handler is None:
            raise ValueError("mode 'callable' needs handler=")
        if mode == "sequence" and not replies:
            raise ValueError("mode 'sequence' needs replies=")
        self.mode = mode
        self.reply = reply
        self.replies = list(replies or [])
        self.handler = handler
        self.retry_after = retry_after
        self.hang_s = hang_s
        self.reject_response_format = reject_response_format
        self.requests: list[dict[str, Any]] = []
        self.auth_headers: list[str | None] = []
        self.statuses: list[int] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._calls = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler_class())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> FakeOpenAI:
        self._thread = threading.Thread(target=self._server.serve_forever, name="fake-openai", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()  # wakes any handler sleeping in "hang" mode
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> FakeOpenAI:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- behaviour ---------------------------------------------------------------------------

    def _decide(self, body: dict[str, Any]) -> tuple[int, dict[str, str], str | None, str]:
        """(status, extra headers, reply text or None, finish_reason) for the call being served."""
        with self._lock:
            n = self._calls
            self._calls += 1
        if self.reject_response_format and "response_format" in body:
            return 400, {}, None, "stop"
        mode = self.mode
        if mode == "error500":
            return 500, {}, None, "stop"
        if mode == "rate_limit_once" and n == 0:
            return 429, {"Retry-After": f"{self.retry_after:g}"}, None, "stop"
        if mode == "hang":
            self._stop.wait(self.hang_s)
            return 200, {}, self.reply or "(late reply)", "stop"
        if mode == "refuse":
            return 200, {}, REFUSAL, "stop"
        if mode == "invalid_json":
            return 200, {}, INVALID_JSON, "stop"
        if mode == "truncated":
            return 200, {}, TRUNCATED, "length"
        if mode == "sequence":
            return 200, {}, self.replies[min(n, len(self.replies) - 1)], "stop"
        if mode == "callable":
            assert self.handler is not None
            return 200, {}, self.handler(body), "stop"
        return 200, {}, self.reply, "stop"

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
                pass  # keep test output clean

            def _send(
                self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None
            ) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (timeout); nothing to deliver

            def do_GET(self) -> None:  # noqa: N802 - stdlib naming
                if self.path.rstrip("/").endswith("/models"):
                    self._send(200, {"object": "list", "data": [{"id": "fake", "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": "not found", "type": "not_found"}})

            def do_POST(self) -> None:  # noqa: N802 - stdlib naming
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                if not self.path.rstrip("/").endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                    return
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    self._send(
                        400, {"error": {"message": "body is not JSON", "type": "invalid_request_error"}}
                    )
                    return
                with server._lock:
                    server.requests.append(body)
                    server.auth_headers.append(self.headers.get("Authorization"))
                status, headers, text, finish = server._decide(body)
                with server._lock:
                    server.statuses.append(status)
                if status != 200 or text is None:
                    kinds = {400: "invalid_request_error", 429: "rate_limit_error", 500: "server_error"}
                    msg = {
                        400: "response_format is not supported by this server",
                        429: "rate limited, retry later",
                        500: "internal error (scripted)",
                    }.get(status, "error")
                    self._send(
                        status, {"error": {"message": msg, "type": kinds.get(status, "error")}}, headers
                    )
                    return
                prompt = "".join(str(m.get("content") or "") for m in body.get("messages", []))
                pt, ct = _approx_tokens(prompt), _approx_tokens(text)
                self._send(
                    200,
                    {
                        "id": f"chatcmpl-fake-{len(server.requests)}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", "fake"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": text},
                                "finish_reason": finish,
                            }
                        ],
                        "usage": {"prompt_tokens": pt, "completion_tokens": ct, "total_tokens": pt + ct},
                    },
                    headers,
                )

        return Handler


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="scripted OpenAI-compatible chat server on 127.0.0.1")
    p.add_argument("--mode", default="fixed", choices=[m for m in MODES if m not in ("callable", "sequence")])
    p.add_argument("--reply-file", help="file whose text is the reply (fixed / rate_limit_once / hang)")
    p.add_argument("--reply", default="", help="reply text (when no --reply-file)")
    p.add_argument("--port", type=int, default=0, help="0 picks a free port (printed on stdout)")
    p.add_argument("--retry-after", type=float, default=1.0)
    p.add_argument("--hang-s", type=float, default=30.0)
    p.add_argument("--reject-response-format", action="store_true")
    a = p.parse_args(argv)
    reply = a.reply
    if a.reply_file:
        with open(a.reply_file, encoding="utf-8") as f:
            reply = f.read()
    srv = FakeOpenAI(
        a.mode,
        reply=reply,
        retry_after=a.retry_after,
        hang_s=a.hang_s,
        reject_response_format=a.reject_response_format,
        port=a.port,
    )
    srv.start()
    print(f"fake OpenAI server ({a.mode}) listening on {srv.base_url}", flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
