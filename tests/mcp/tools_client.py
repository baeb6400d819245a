"""Lists and calls an executa plugin's tools with the official MCP Python SDK's `Client` in
one connection mode and prints one JSON report of what the SDK parsed:
`tools_client.py MODE TOOL -- CMD ARGS...`, MODE being `legacy` (the initialize
handshake) or a version pin such as `2026-07-28` (stateless requests), TOOL a tool with an
`outputSchema` whose calls the report covers.

The SDK client validates each successful result's `structuredContent` against the tool's
`outputSchema` (and fails the call when it does not conform), so a call that succeeds
here is one whose structured result matched its schema. Every step runs under a timeout,
so a hang is a failure with a message. The Rust test (tests/plugin_mcp_tools.rs) asserts
on the report.
"""

import json
import sys

import anyio
from mcp import StdioServerParameters, types
from mcp.client.client import Client

REQUEST_TIMEOUT_S = 30.0
OVERALL_TIMEOUT_S = 120.0


def tool_report(tool):
    """A listed tool as the SDK parsed it (its own field names, back in wire spelling)."""
    annotations = tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else None
    return {
        "title": tool.title,
        "description": tool.description,
        "output_schema": tool.output_schema,
        "annotations": annotations,
    }


async def call(client, name, arguments):
    """A call's outcome: the parsed result, or the SDK's refusal of it as text."""
    try:
        r = await client.call_tool(name, arguments)
    except Exception as e:  # the SDK's validation failure is a RuntimeError
        return {"refused": f"{type(e).__name__}: {e}"}
    return {"is_error": r.is_error, "structured": r.structured_content}


async def validator_rejects(client, name):
    """Whether the SDK's validator, fed the schema listed for `name`, refuses a result of
    the wrong shape: proof that the calls above were checked, not waved through."""
    wrong = types.CallToolResult(
        content=[types.TextContent(type="text", text="{}")],
        structured_content={"unexpected": True},
    )
    try:
        await client.session.validate_tool_result(name, wrong)
    except RuntimeError as e:
        return str(e).splitlines()[0]
    return None


async def scenario(mode, tool, command, args):
    report = {"mode": mode}
    server = StdioServerParameters(command=command, args=args)
    async with Client(server, mode=mode, read_timeout_seconds=REQUEST_TIMEOUT_S) as client:
        report["protocol_version"] = client.protocol_version
        listed = await client.list_tools()
        # Caching hints: parsed only on a 2026-07-28 session (the SDK drops a later
        # revision's fields on an older one, and its model then shows defaults: only what
        # was read from the wire is reported).
        read = listed.model_fields_set
        report["ttl_ms"] = listed.ttl_ms if "ttl_ms" in read else None
        report["cache_scope"] = listed.cache_scope if "cache_scope" in read else None
        report["tools"] = {t.name: tool_report(t) for t in listed.tools}
        report["some"] = await call(client, tool, {"numbers": [1, 2, 4.5]})
        report["none"] = await call(client, tool, {"numbers": []})
        report["validator_rejects"] = await validator_rejects(client, tool)
    report["closed"] = True
    return report


async def main():
    argv = sys.argv[1:]
    mode, tool = argv[0], argv[1]
    argv = argv[2:]
    if argv and argv[0] == "--":
        argv = argv[1:]
    with anyio.fail_after(OVERALL_TIMEOUT_S):
        report = await scenario(mode, tool, argv[0], argv[1:])
    print(json.dumps(report))


if __name__ == "__main__":
    anyio.run(main)
