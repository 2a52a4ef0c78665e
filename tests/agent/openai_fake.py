"""A scripted OpenAI-compatible chat-completions server on loopback, for the real ``openai`` client.

Replies are served in order; every request body is recorded so tests can read the prompts.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ScriptedOpenAI:
    def __init__(self, replies: list[str], tokens_per_reply: int = 1000):
        self.replies = list(replies)
        self.tokens_per_reply = tokens_per_reply
        self.requests: list[dict] = []
        self.auth_headers: list[str | None] = []
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address
        return f"http://{host}:{port}/v1"

    def __enter__(self) -> ScriptedOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _next(self, body: dict) -> tuple[int, dict]:
        self.requests.append(body)
        if not self.replies:
            return 500, {"error": {"message": "script exhausted", "type": "server_error"}}
        text = self.replies.pop(0)
        prompt = sum(len(m.get("content") or "") for m in body.get("messages", [])) // 4
        return 200, {
            "id": f"chatcmpl-{len(self.requests)}", "object": "chat.completion", "created": 0,
            "model": body.get("model", "scripted"),
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": text}}],
            "usage": {"prompt_tokens": prompt, "completion_tokens": self.tokens_per_reply,
                      "total_tokens": prompt + self.tokens_per_reply}}

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                if not self.path.endswith("/chat/completions"):
                    self._send(404, {"error": {"message": f"no route {self.path}"}})
                    return
                fake.auth_headers.append(self.headers.get("Authorization"))
                self._send(*fake._next(body))

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args):
                pass

        return Handler
