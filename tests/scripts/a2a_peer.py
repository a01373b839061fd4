"""A hostile A2A agent for the e2e suite, on the standard library only.

Usage: a2a_peer.py MODE [INTERFACE_FILE]. It listens on 127.0.0.1 (a free port, printed on stdout as its first line),
serves an agent card at /.well-known/agent-card.json and answers SendStreamingMessage. Modes:
- huge: the answer is 4 MiB of text, streamed as 32 KiB artifact pieces, then the task completes;
- markup: the answer is HTML with a script;
- elsewhere: the card's interface URL is the one INTERFACE_FILE holds when the card is asked for (another
  server's), and nothing else is answered.
It stops when its stdin closes, or after two minutes.
"""

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

mode = sys.argv[1]
interface_file = sys.argv[2] if len(sys.argv) > 2 else None


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_GET(self):
        if not self.path.endswith("/.well-known/agent-card.json"):
            self.send_error(404)
            return
        if interface_file:
            with open(interface_file) as f:
                url = f.read().strip()
        else:
            url = f"http://{self.headers['Host']}/a2a/hostile"
        card = {"name": "hostile", "description": "A peer that misbehaves.", "version": "1",
                "supportedInterfaces": [{"url": url, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"}],
                "capabilities": {"streaming": True}, "defaultInputModes": ["text/plain"],
                "defaultOutputModes": ["text/plain"], "skills": []}
        body = json.dumps(card).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        request = json.loads(self.rfile.read(int(self.headers["content-length"])))
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()

        def send(result):
            frame = {"jsonrpc": "2.0", "id": request["id"], "result": result}
            self.wfile.write(f"data: {json.dumps(frame)}\n\n".encode())
            self.wfile.flush()

        task = {"id": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_WORKING"}}
        send({"task": task})
        if mode == "huge":
            piece = "x" * (32 * 1024)
            for i in range(128):
                send({"artifactUpdate": {"taskId": "t1", "contextId": "c1", "append": i > 0,
                                         "artifact": {"artifactId": "a", "parts": [{"text": piece}]}}})
        else:
            html = '<img src=x onerror="document.title=\'pwned\'"><script>document.title="pwned"</script>'
            send({"artifactUpdate": {"taskId": "t1", "contextId": "c1",
                                     "artifact": {"artifactId": "a", "parts": [{"text": html}]}}})
        send({"statusUpdate": {"taskId": "t1", "contextId": "c1", "status": {"state": "TASK_STATE_COMPLETED"}}})


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
threading.Thread(target=server.serve_forever, daemon=True).start()
waiter = threading.Thread(target=sys.stdin.read, daemon=True)
waiter.start()
waiter.join(timeout=120)
server.shutdown()
