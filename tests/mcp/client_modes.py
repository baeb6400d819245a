"""Drives an executa plugin over MCP with the official Python SDK's high-level `Client` in one
of its connection modes and prints one JSON report: `client_modes.py MODE -- CMD ARGS...`,
MODE being `legacy` (the initialize handshake), `auto` (probe `server/discover`, fall back
to the handshake on an error) or a version pin such as `2026-07-28` (stateless requests, no
probe). The Rust test (tests/plugin_mcp_modes.rs) asserts on the report.

Every step runs under a timeout, so a hang is a failure with a message.
"""

import json
import sys

import anyio
from mcp import StdioServerParameters
from mcp.client.client import Client
from sdk_common import call_report, expect_error, sampling

REQUEST_TIMEOUT_S = 30.0
OVERALL_TIMEOUT_S = 120.0


async def scenario(mode, command, args):
    report = {"mode": mode}
    server = StdioServerParameters(command=command, args=args)
    async with Client(
        server,
        mode=mode,
        read_timeout_seconds=REQUEST_TIMEOUT_S,
        sampling_callback=sampling,
    ) as client:
        report["protocol_version"] = client.protocol_version
        info = client.server_info
        report["server_name"] = info.name if info is not None else None
        report["instructions"] = client.instructions
        report["has_tools_capability"] = client.server_capabilities.tools is not None
        listed = await client.list_tools()
        report["tools"] = sorted(t.name for t in listed.tools)
        names = set(report["tools"])
        if "echo" in names:
            report["echo"] = call_report(await client.call_tool("echo", {"text": "hi", "n": 3}))
        if "greet" in names:
            report["greet"] = call_report(await client.call_tool("greet", {"name": "Ada"}))
        if "fail" in names:
            report["fail"] = call_report(await client.call_tool("fail", {"message": "no luck"}))
        if "sample" in names:
            r = await client.call_tool("sample", {"prompt": "name a colour", "max_tokens": 16})
            report["sample"] = call_report(r)
        if "progress" in names:
            seen = []

            async def on_progress(progress, total, message):
                seen.append({"progress": progress, "total": total, "message": message})

            r = await client.call_tool("progress", {"steps": 3}, progress_callback=on_progress)
            report["progress"] = call_report(r)
            report["progress_seen"] = seen
        if "sleep" in names:
            async with anyio.create_task_group() as tg:
                results = []

                async def one():
                    results.append(call_report(await client.call_tool("sleep", {"ms": 100})))

                for _ in range(10):
                    tg.start_soon(one)
            report["in_flight"] = results
        report["unknown_tool"] = await expect_error(client.call_tool("no_such_tool", {}))
    report["closed"] = True
    return report


async def main():
    argv = sys.argv[1:]
    mode = argv[0]
    argv = argv[1:]
    if argv and argv[0] == "--":
        argv = argv[1:]
    with anyio.fail_after(OVERALL_TIMEOUT_S):
        report = await scenario(mode, argv[0], argv[1:])
    print(json.dumps(report))


if __name__ == "__main__":
    anyio.run(main)
