"""A hand-written MCP stdio server whose `tools/list` is large, for the host's read bounds:
`python3 big_tools_server.py PAGE_MIB PAGES [SHAPE]`.

Every `tools/list` page is about PAGE_MIB MiB of tools (each with a large `inputSchema`);
PAGES pages are offered (each but the last names a `nextCursor`), so a host that reads them
all reads PAGES x PAGE_MIB MiB. SHAPE is how each tool looks:
- `wide` (the default): 200 string properties of a few words each, as a generated API
  binding's schema looks;
- `dense`: properties whose schemas are tiny objects (`{"type":"integer"}`), the costliest
  shape per byte for a JSON tree;
- `refs`: a small schema whose object refers to itself ten times (`$ref`), which a reader
  expanding references into nested parameter lists grows tenfold at each level;
- `long`: a few tools whose description is one long string, the cheapest shape per byte
  for a JSON tree;
- `tiny`: tools that are a name and nothing else, as many as fit.
A fractional PAGE_MIB (`0.01`) makes small pages. A page is written tool by tool, never
held whole, so this process stays small whatever the page's size (a memory measurement
of the host that waits for it counts it too). Answers `initialize`, `tools/list` and
`ping`; exits on stdin EOF.
"""

import json
import sys

PAGE_MIB = float(sys.argv[1]) if len(sys.argv) > 1 else 15
PAGES = int(sys.argv[2]) if len(sys.argv) > 2 else 1
SHAPE = sys.argv[3] if len(sys.argv) > 3 else "wide"


def schema():
    if SHAPE == "refs":
        node = {"type": "object",
                "properties": {c: {"$ref": "#/$defs/Node"} for c in "abcdefghij"}}
        return {"type": "object", "$defs": {"Node": node},
                "properties": {"root": {"$ref": "#/$defs/Node"}}}
    if SHAPE == "dense":
        props = {f"p{i}": {"type": "integer"} for i in range(400)}
    else:
        props = {
            f"field_{i}": {"type": "string", "description": f"The value of field {i}, as text."}
            for i in range(200)
        }
    return {"type": "object", "properties": props, "required": ["field_0"]}


def tool_tail():
    """A tool's JSON after its name."""
    if SHAPE == "tiny":
        return "}"
    if SHAPE == "long":
        text = "a long description. " * (1024 * 1024 // 20)
        return ',"description":%s,"inputSchema":{"type":"object"}}' % json.dumps(text)
    return ',"description":"A tool with a large schema.","inputSchema":%s}' % json.dumps(
        schema())


def write_page(rid, page):
    tail = tool_tail()
    count = max(1, int(PAGE_MIB * 1024 * 1024 / (len(tail) + 24)))
    out = sys.stdout
    out.write('{"jsonrpc":"2.0","id":%s,"result":{"tools":[' % json.dumps(rid))
    for i in range(count):
        out.write('%s{"name":"tool_%d_%d"%s' % ("," if i else "", page, i, tail))
    more = ',"nextCursor":"c%d"' % (page + 1) if page + 1 < PAGES else ""
    out.write("]%s}}\n" % more)
    out.flush()


def answer(msg, result):
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}) + "\n")
    sys.stdout.flush()


def main():
    while True:
        line = sys.stdin.readline()
        if not line:
            return
        msg = json.loads(line)
        method = msg.get("method")
        if "id" not in msg or method is None:
            continue
        if method == "initialize":
            answer(msg, {
                "protocolVersion": "2025-11-25",
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "big", "version": "1.0.0"},
            })
        elif method == "tools/list":
            cursor = (msg.get("params") or {}).get("cursor")
            write_page(msg["id"], int(cursor[1:]) if cursor else 0)
        elif method == "ping":
            answer(msg, {})
        else:
            sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": {
                "code": -32601, "message": "no " + method}}) + "\n")
            sys.stdout.flush()


main()
