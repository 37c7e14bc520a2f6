#!/usr/bin/env python3
"""An HTTP proxy in front of one rollout server that goes bad on a signal (tests/faults/matrix.sh).

    flaky_proxy.py UPSTREAM_URL     prints "listening on http://127.0.0.1:PORT" once it accepts

Every request is forwarded to UPSTREAM_URL as it came, until the proxy receives SIGUSR1, after which
every answer is a 500, or SIGUSR2, after which every answer is a 200 whose body is not JSON (a
proxy's error page, a broken server). Standard library only.
"""
import http.client
import http.server
import signal
import sys
import urllib.parse

upstream = urllib.parse.urlsplit(sys.argv[1])
mode = "forward"


def go_bad(signum, _frame):
    global mode
    mode = "500" if signum == signal.SIGUSR1 else "garbage"


signal.signal(signal.SIGUSR1, go_bad)
signal.signal(signal.SIGUSR2, go_bad)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def reply(self, status, body, content_type):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def forward(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else None
        if mode == "500":
            return self.reply(500, b'{"error": {"message": "injected fault"}}', "application/json")
        if mode == "garbage":
            return self.reply(200, b"<html><body>502 Bad Gateway</body></html>", "text/html")
        conn = http.client.HTTPConnection(upstream.hostname, upstream.port, timeout=600)
        headers = {k: v for k, v in self.headers.items() if k.lower() in ("content-type", "authorization")}
        try:
            conn.request(self.command, self.path, body, headers)
            answer = conn.getresponse()
            data = answer.read()
            self.reply(answer.status, data, answer.getheader("Content-Type", "application/json"))
        except OSError as e:
            self.reply(502, str(e).encode(), "text/plain")
        finally:
            conn.close()

    do_GET = forward
    do_POST = forward


server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(f"listening on http://127.0.0.1:{server.server_address[1]}", flush=True)
server.serve_forever()
