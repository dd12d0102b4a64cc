"""A webhook receiver on 127.0.0.1 (``Receiver``: records each POST, answers as told, can trickle its
answer), and the ``receiver`` fixture that makes them and closes them after the test."""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest


class Receiver:
    """A webhook receiver on a free port: ``answers`` says what to answer to the first, second, ...
    POST of each delivery id (a status code, or "trickle": a 200 response sent one byte every
    ``TRICKLE_SECONDS``; the last one repeats). Each POST is recorded as (headers, body, when its
    body was read, when its answer or its connection ended: ``None`` until then)."""

    TRICKLE_SECONDS = 0.5

    def __init__(self, answers: list):
        self.answers = answers
        self.posts: list[tuple[dict, dict, float, float | None]] = []
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["content-length"])))
                started = time.monotonic()
                earlier = sum(1 for _, seen, *_ in receiver.posts if seen.get("id") == body.get("id"))
                answer = receiver.answers[min(earlier, len(receiver.answers) - 1)]
                index = len(receiver.posts)
                receiver.posts.append((dict(self.headers), body, started, None))
                if answer == "trickle":
                    response = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"
                    try:
                        for byte in response:
                            self.wfile.write(bytes([byte]))
                            self.wfile.flush()
                            time.sleep(receiver.TRICKLE_SECONDS)
                    except OSError:  # the sender gave up and closed the connection
                        pass
                    self.close_connection = True
                else:
                    self.send_response(answer)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                receiver.posts[index] = (*receiver.posts[index][:3], time.monotonic())

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}/alarms"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def held(self) -> list[float]:
        """Seconds each POST held its sender, until now for those not ended."""
        return [(ended or time.monotonic()) - started for *_, started, ended in self.posts]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver(request):
    made = []

    def make(answers: list) -> Receiver:
        made.append(Receiver(answers))
        return made[-1]

    yield make
    for one in made:
        one.close()
