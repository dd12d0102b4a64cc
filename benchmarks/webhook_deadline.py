"""How long one webhook attempt holds its sender against a receiver that trickles its answer one
byte at a time: ``app.monitoring.webhooks.post`` (a total deadline) for several deadlines, and, for
comparison, ``urllib.request.urlopen`` with a 5 s timeout (a bound per read, as the service had).

    python benchmarks/webhook_deadline.py [repeats]

Prints a Markdown table: per trickle interval and deadline, the mean and largest elapsed seconds
and the overshoot past the deadline."""

from __future__ import annotations

import http.server
import sys
import threading
import time
import urllib.request

from app.monitoring.webhooks import post

RESPONSE = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"


def trickling_receiver(interval: float) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["content-length"]))
            try:
                for byte in RESPONSE:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(interval)
            except OSError:
                pass
            self.close_connection = True

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def per_read_timeout(url: str) -> None:
    request = urllib.request.Request(url, data=b"{}", method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5.0) as answer:
        answer.read()


def main(repeats: int) -> None:
    print("| trickle (s/byte) | sender | runs | mean elapsed (s) | max elapsed (s) | max overshoot (s) |")
    print("|---|---|---|---|---|---|")
    for interval, deadlines, compare in ((2.0, (1.0, 3.0, 5.0), False), (0.25, (0.5, 1.0, 2.0), True)):
        server = trickling_receiver(interval)
        url = f"http://127.0.0.1:{server.server_port}/hook"
        cases = [(f"total deadline {d:g} s", d, lambda d=d, url=url: post(url, "bench", {}, d)) for d in deadlines]
        if compare:
            cases.append(("urllib, 5 s per read", None, lambda url=url: per_read_timeout(url)))
        for label, deadline, call in cases:
            elapsed = []
            for _ in range(repeats if deadline is not None else 1):
                started = time.monotonic()
                call()
                elapsed.append(time.monotonic() - started)
            over = f"{max(elapsed) - deadline:.3f}" if deadline is not None else "—"
            print(f"| {interval:g} | {label} | {len(elapsed)} | {sum(elapsed) / len(elapsed):.3f} | "
                  f"{max(elapsed):.3f} | {over} |")
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)
