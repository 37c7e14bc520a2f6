#!/usr/bin/env python3
"""A stand-in LLM judge for tests: an OpenAI-compatible server (GET /v1/models, POST
/v1/chat/completions) that scores the text after "Response:" in its prompt by its length:
"Score: <len % 11>", or "I cannot tell." when the response holds NOSCORE. Every prompt it is sent
is appended to LOG as a JSON line. With --fail, every chat request is answered 500.
Usage: fake_judge.py PORT_FILE LOG [--fail]  (binds a free port and writes it to PORT_FILE)"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

port_file, log_path = sys.argv[1], sys.argv[2]
fail = "--fail" in sys.argv[3:]


class Judge(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/v1/models":
            self.reply(200, {"object": "list", "data": [{"id": "fake-judge", "object": "model"}]})
        else:
            self.reply(404, {"error": {"message": "no such path"}})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        if self.path != "/v1/chat/completions":
            self.reply(404, {"error": {"message": "no such path"}})
            return
        if fail:
            self.reply(500, {"error": {"message": "the fake judge fails on purpose"}})
            return
        prompt = body["messages"][-1]["content"]
        with open(log_path, "a") as log:
            log.write(json.dumps({"model": body.get("model"), "temperature": body.get("temperature"),
                                  "max_tokens": body.get("max_tokens"), "prompt": prompt}) + "\n")
        response = prompt.split("Response:", 1)[1].strip() if "Response:" in prompt else prompt
        text = "I cannot tell." if "NOSCORE" in response else f"It reads well. Score: {len(response) % 11}"
        self.reply(200, {"id": "judge-1", "object": "chat.completion", "model": body.get("model"),
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                      "finish_reason": "stop"}]})


server = ThreadingHTTPServer(("127.0.0.1", 0), Judge)
with open(port_file + ".tmp", "w") as f:
    f.write(str(server.server_address[1]))
import os
os.replace(port_file + ".tmp", port_file)
server.serve_forever()
