"""Drives an executa plugin in MCP mode with the official MCP Python SDK's client and
prints one JSON report of what it saw: `client.py [--no-sampling] -- CMD ARGS...`.

Every step runs under a timeout (the SDK's read timeout per request, and an overall
one), so a hang is a failure with a message, never a stuck test. The Rust test
(tests/plugin_mcp.rs) asserts on the report.
"""

import asyncio
import json
import sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from sdk_common import call_report, expect_error, sampling

REQUEST_TIMEOUT_S = 30.0
OVERALL_TIMEOUT_S = 120.0


async def scenario(command, args, with_sampling):
    report = {}
    server = StdioServerParameters(command=command, args=args)
    async with stdio_client(server) as (read, write):
        async with ClientSession(
            read,
            write,
            read_timeout_seconds=REQUEST_TIMEOUT_S,
            sampling_callback=sampling if with_sampling else None,
        ) as session:
            init = await session.initialize()
            report["protocol_version"] = init.protocol_version
            report["server_name"] = init.server_info.name
            report["instructions"] = init.instructions
            report["has_tools_capability"] = init.capabilities.tools is not None

            listed = await session.list_tools()
            report["tools"] = {t.name: t.input_schema for t in listed.tools}
            names = set(report["tools"])

            if "echo" in names:
                r = await session.call_tool("echo", {"text": "hi", "n": 3})
                report["echo"] = call_report(r)
            if "greet" in names:
                r = await session.call_tool("greet", {"name": "Ada"})
                report["greet"] = call_report(r)
            if "fail" in names:
                report["fail"] = call_report(await session.call_tool("fail", {"message": "no luck"}))
            if "sleep" in names:
                report["invalid"] = call_report(await session.call_tool("sleep", {"ms": "soon"}))
                calls = [session.call_tool("sleep", {"ms": 200}) for _ in range(20)]
                results = await asyncio.gather(*calls)
                report["in_flight"] = [call_report(r) for r in results]
            if "sample" in names:
                r = await session.call_tool("sample", {"prompt": "name a colour", "max_tokens": 16})
                report["sample"] = call_report(r)
            if "progress" in names:
                seen = []

                async def on_progress(progress, total, message):
                    seen.append({"progress": progress, "total": total, "message": message})

                r = await session.call_tool("progress", {"steps": 3}, progress_callback=on_progress)
                report["progress"] = call_report(r)
                report["progress_seen"] = seen
            if "remember" in names:
                report["storage"] = call_report(
                    await session.call_tool("remember", {"key": "k", "value": "v"})
                )
            if "panic" in names:
                report["panic"] = await expect_error(session.call_tool("panic", {}))
            report["unknown_tool"] = await expect_error(session.call_tool("no_such_tool", {}))
            await session.send_ping()
            report["ping"] = True
    report["closed"] = True
    return report


async def main():
    argv = sys.argv[1:]
    with_sampling = True
    if argv and argv[0] == "--no-sampling":
        with_sampling = False
        argv = argv[1:]
    if argv and argv[0] == "--":
        argv = argv[1:]
    with anyio.fail_after(OVERALL_TIMEOUT_S):
        report = await scenario(argv[0], argv[1:], with_sampling)
    print(json.dumps(report))


if __name__ == "__main__":
    anyio.run(main)
