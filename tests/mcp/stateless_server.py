"""A hand-written MCP stdio server (no SDK) for the corners of the 2026-07-28 era that the
SDK's server does not show: `python3 stateless_server.py MODE`.

MODE says which era it speaks and how it answers `server/discover`:
- `both`: `server/discover` lists 2025-11-25 and 2026-07-28; requests of the stateless
  era must carry the `_meta` envelope (-32602 otherwise, as the SDK answers); `initialize`
  starts the handshake era instead (then `notifications/initialized` is expected);
- `legacy`: `server/discover` is -32601 (a server from before 2026-07-28); the handshake;
- `disjoint`: `server/discover` and `initialize` are -32022, `supported` ["2099-01-01"];
- `mixed`: `server/discover` is -32022 naming 2025-11-25 and 2099-01-01; the handshake;
- `once`: the first `server/discover` is -32022 naming 2026-07-28, then as `both`;
- `endless`: as `both`, but `tools/list` pages never end (a new `nextCursor` each time).

It writes every message it reads to stderr as `seen: <json line>` (the tests read them
back) and serves these tools:
- `echo` returns its arguments;
- `log` returns every message read so far (the calls to `log` itself aside);
- `ask` answers `input_required` (a sampling request, `roots/list` and an elicitation,
  and a `requestState` whose JSON text has escapes), then, on the retry, returns what
  came back: the answers, and whether the state's JSON text came back byte for byte;
- `forever` answers `input_required` (a `roots/list` request) every time;
- `patience` answers two state-only results (no requests), then `{"waited": 2}`.
Single-threaded: one request at a time.
"""

import json
import sys

MODE = sys.argv[1] if len(sys.argv) > 1 else "both"
STATELESS = "2026-07-28"
HANDSHAKE = ["2025-06-18", "2025-11-25"]
ENVELOPE = ["io.modelcontextprotocol/protocolVersion", "io.modelcontextprotocol/clientCapabilities"]
# Escaped as sent: the retry must carry these very bytes.
STATE_TEXT = '"st\\u00e9te\\/1 \\ud83d\\ude00"'

seen = []


def send(message):
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def answer(msg, result):
    send({"jsonrpc": "2.0", "id": msg["id"], "result": result})


def send_raw(msg, result_text):
    sys.stdout.write('{"jsonrpc":"2.0","id":%s,"result":%s}\n' % (json.dumps(msg["id"]), result_text))
    sys.stdout.flush()


def fail(msg, code, message, data=None):
    error = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    send({"jsonrpc": "2.0", "id": msg["id"], "error": error})


def text(value, stateless):
    result = {"content": [{"type": "text", "text": json.dumps(value)}]}
    if stateless:
        result["resultType"] = "complete"
    return result


def discover_result():
    return {
        "supportedVersions": HANDSHAKE + [STATELESS],
        "capabilities": {"tools": {}},
        "instructions": f"stateless-{MODE} instructions",
        "resultType": "complete",
        "ttlMs": 0,
        "cacheScope": "public",
        "_meta": {"io.modelcontextprotocol/serverInfo": {"name": f"stateless-{MODE}", "version": "1.2.3"}},
    }


def unsupported(msg, asked, supported):
    fail(msg, -32022, "Unsupported protocol version", {"requested": asked, "supported": supported})


def input_required(requests, state_text):
    parts = ['"resultType":"input_required"']
    if requests is not None:
        parts.append('"inputRequests":' + json.dumps(requests))
    if state_text is not None:
        parts.append('"requestState":' + state_text)
    return "{" + ",".join(parts) + "}"


def call_tool(msg, line, stateless, counts):
    params = msg.get("params") or {}
    name = params.get("name")
    counts[name] = counts.get(name, 0) + 1
    if name == "echo":
        answer(msg, text(params.get("arguments"), stateless))
    elif name == "log":
        answer(msg, text([m for m in seen if not is_log_call(m)], stateless))
    elif name == "ask":
        if "inputResponses" not in params:
            requests = {
                "llm": {"method": "sampling/createMessage", "params": {
                    "messages": [{"role": "user", "content": {"type": "text", "text": params["arguments"]["question"]}}],
                    "maxTokens": 50, "systemPrompt": "Be brief."}},
                "dirs": {"method": "roots/list"},
                "who": {"method": "elicitation/create", "params": {
                    "message": "Your name?", "requestedSchema": {"type": "object", "properties": {}}}},
            }
            send_raw(msg, input_required(requests, STATE_TEXT))
        else:
            back = {
                "responses": params["inputResponses"],
                "state_bytes_kept": ('"requestState":' + STATE_TEXT) in line,
            }
            answer(msg, text(back, stateless))
    elif name == "forever":
        send_raw(msg, input_required({"r": {"method": "roots/list"}}, '"round-%d"' % counts[name]))
    elif name == "patience":
        if counts[name] <= 2:
            send_raw(msg, input_required(None, '"wait-%d"' % counts[name]))
        else:
            answer(msg, text({"waited": 2, "states": [m["params"].get("requestState") for m in seen
                                                       if m.get("method") == "tools/call"
                                                       and m["params"].get("name") == "patience"]}, stateless))
    else:
        fail(msg, -32602, f"Unknown tool: {name}")


def is_log_call(m):
    return m.get("method") == "tools/call" and (m.get("params") or {}).get("name") == "log"


def stateless_request(msg, line, counts):
    meta = (msg.get("params") or {}).get("_meta")
    if not isinstance(meta, dict) or any(k not in meta for k in ENVELOPE):
        return fail(msg, -32602, "params._meta must carry the envelope")
    if meta[ENVELOPE[0]] != STATELESS:
        return unsupported(msg, meta[ENVELOPE[0]], HANDSHAKE + [STATELESS])
    method = msg["method"]
    if method == "server/discover":
        answer(msg, discover_result())
    elif method == "tools/list" and MODE == "endless":
        page = counts["pages"] = counts.get("pages", 0) + 1
        tools = [{"name": f"t{page}", "inputSchema": {"type": "object"}}]
        answer(msg, {"tools": tools, "nextCursor": f"c{page}", "resultType": "complete"})
    elif method == "tools/list":
        tools = [{"name": n, "inputSchema": {"type": "object"}} for n in ["echo", "log", "ask", "forever", "patience"]]
        answer(msg, {"tools": tools, "resultType": "complete", "ttlMs": 0, "cacheScope": "public"})
    elif method == "tools/call":
        call_tool(msg, line, True, counts)
    else:
        fail(msg, -32601, "Method not found")


def main():
    era = None  # "stateless" or "handshake", settled by the first request
    initialized = False
    discovers = 0
    counts = {}
    for line in sys.stdin:
        msg = json.loads(line)
        seen.append(msg)
        print("seen: " + line.strip(), file=sys.stderr, flush=True)
        method = msg.get("method")
        if "id" not in msg:
            if method == "notifications/initialized":
                initialized = True
            continue
        if method == "server/discover" and era != "handshake":
            discovers += 1
            asked = ((msg.get("params") or {}).get("_meta") or {}).get(ENVELOPE[0])
            if MODE == "legacy":
                fail(msg, -32601, "Method not found")
                continue
            if MODE == "disjoint":
                unsupported(msg, asked, ["2099-01-01"])
                continue
            if MODE == "mixed":
                unsupported(msg, asked, ["2025-11-25", "2099-01-01"])
                continue
            if MODE == "once" and discovers == 1:
                unsupported(msg, asked, [STATELESS])
                continue
            era = "stateless"
            stateless_request(msg, line, counts)
        elif method == "initialize" and era is None:
            asked = msg.get("params", {}).get("protocolVersion")
            if MODE == "disjoint":
                unsupported(msg, asked, ["2099-01-01"])
                continue
            era = "handshake"
            answer(msg, {
                "protocolVersion": asked if asked in HANDSHAKE else HANDSHAKE[-1],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": f"stateless-{MODE}", "version": "1.2.3"},
            })
        elif era == "stateless":
            stateless_request(msg, line, counts)
        elif era == "handshake" and initialized:
            if method == "ping":
                answer(msg, {})
            elif method == "tools/list":
                answer(msg, {"tools": [{"name": n, "inputSchema": {"type": "object"}} for n in ["echo", "log"]]})
            elif method == "tools/call":
                call_tool(msg, line, False, counts)
            else:
                fail(msg, -32601, "Method not found")
        else:
            fail(msg, -32002, f"{method}: the session is not settled (era {era})")


main()
