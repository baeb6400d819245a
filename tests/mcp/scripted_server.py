"""A hand-written MCP stdio server (no SDK) for the handshake corners the SDK server does
not show: `python3 scripted_server.py MODE`.

MODE says how it answers `initialize`:
- `refuses`: a request for a revision it does not know is an error "Unsupported protocol
  version" (as a strict server may answer the Executa "2.0");
- `newer`: it speaks 2025-11-25 and 2026-07-28, and answers 2026-07-28 to anything else
  (so a host that asked "2.0" must ask again);
- `future`: it answers 2030-01-01 whatever was asked.

Then it wants `notifications/initialized` before anything else (-32002 otherwise), serves
`tools/list` in two pages (`nextCursor`), and two tools: `hello` returns the `initialize`
params it got, and `probe` asks the client `ping` and `roots/list` before it answers with
what came back. Single-threaded: one request at a time.
"""

import json
import sys

MODE = sys.argv[1] if len(sys.argv) > 1 else "refuses"
KNOWN = ["2025-06-18", "2025-11-25"]


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def read():
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)
    return json.loads(line)


def answer(msg, result):
    send({"jsonrpc": "2.0", "id": msg["id"], "result": result})


def fail(msg, code, message):
    send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": code, "message": message}})


def text(value):
    return {"content": [{"type": "text", "text": json.dumps(value)}]}


def ask_client(method, rid):
    """Sends a request to the client and reads until its answer (nothing else is sent meanwhile)."""
    send({"jsonrpc": "2.0", "id": rid, "method": method})
    while True:
        msg = read()
        if msg.get("id") == rid and "method" not in msg:
            return msg.get("result", {"error": msg.get("error")})


def main():
    init_params = None
    initialized = False
    while True:
        msg = read()
        method = msg.get("method")
        if "id" not in msg:
            if method == "notifications/initialized":
                initialized = True
            continue
        if method == "initialize":
            asked = msg.get("params", {}).get("protocolVersion")
            if MODE == "refuses" and asked not in KNOWN:
                fail(msg, -32602, f"Unsupported protocol version: {asked}")
                continue
            if MODE == "newer":
                version = asked if asked in ("2025-11-25", "2026-07-28") else "2026-07-28"
            elif MODE == "future":
                version = "2030-01-01"
            else:
                version = asked
            init_params = msg.get("params")
            answer(msg, {
                "protocolVersion": version,
                "capabilities": {"tools": {}},
                "serverInfo": {"name": f"scripted-{MODE}", "version": "9.9.9"},
            })
        elif not initialized:
            fail(msg, -32002, f"{method} before notifications/initialized")
        elif method == "ping":
            answer(msg, {})
        elif method == "tools/list":
            cursor = (msg.get("params") or {}).get("cursor")
            schema = {"type": "object", "properties": {}}
            if cursor is None:
                answer(msg, {"tools": [{"name": "hello", "inputSchema": schema}], "nextCursor": "page-2"})
            elif cursor == "page-2":
                answer(msg, {"tools": [{"name": "probe", "inputSchema": schema}]})
            else:
                fail(msg, -32602, f"unknown cursor {cursor}")
        elif method == "tools/call":
            name = msg["params"]["name"]
            if name == "hello":
                answer(msg, text(init_params))
            elif name == "probe":
                got = {"ping": ask_client("ping", "s-1"), "roots": ask_client("roots/list", "s-2")}
                answer(msg, text(got))
            else:
                fail(msg, -32602, f"Unknown tool: {name}")
        else:
            fail(msg, -32601, "Method not found")


main()
