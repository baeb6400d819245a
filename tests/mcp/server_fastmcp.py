"""An MCP stdio server written with the official MCP Python SDK, for the host-side tests
(`tests/host_mcp.rs`): typed tools, structured output, a tool error, sampling through
the client, and progress.

The SDK's high-level server was `FastMCP` in mcp 1.x and is `MCPServer` in mcp 2.x (the
version `venv.sh` installs); both are accepted here, so the fixture runs under either.
"""

import sys
from typing import Optional

from pydantic import BaseModel

try:
    from mcp.server.mcpserver import Context, MCPServer as Server
    from mcp.server.mcpserver.exceptions import ToolError
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import Context, FastMCP as Server
    from mcp.server.fastmcp.exceptions import ToolError

from mcp.types import SamplingMessage, TextContent

server = Server(
    name="pyfixture",
    instructions="An MCP fixture server for executa's host tests.",
    version="0.3.1",
)


class Sum(BaseModel):
    total: int
    count: int


@server.tool(description="Adds integers; answers structured output.")
def add(numbers: list[int], offset: int = 0) -> Sum:
    return Sum(total=sum(numbers) + offset, count=len(numbers))


@server.tool(description="Echoes text, repeated (plain text content, no structured output).", structured_output=False)
def echo(text: str, times: int = 1, shout: Optional[bool] = None) -> str:
    out = " ".join([text] * times)
    return out.upper() if shout else out


@server.tool(description="Always fails with a tool error.")
def fail(reason: str) -> str:
    raise ToolError(f"refused: {reason}")


@server.tool(description="Asks the client's model through sampling.")
async def ask(question: str, ctx: Context) -> str:
    result = await ctx.session.create_message(
        messages=[SamplingMessage(role="user", content=TextContent(type="text", text=question))],
        max_tokens=64,
        system_prompt="Answer briefly.",
        temperature=0.2,
        stop_sequences=["STOP"],
    )
    content = result.content
    text = content.text if isinstance(content, TextContent) else str(content)
    return f"{result.model}|{result.stop_reason}|{text}"


@server.tool(description="Reports progress steps, then returns their count.")
async def slow(steps: int, ctx: Context) -> dict:
    for i in range(1, steps + 1):
        await ctx.report_progress(i, steps, f"step {i}")
    return {"steps": steps}


if __name__ == "__main__":
    print("pyfixture: serving on stdio", file=sys.stderr, flush=True)
    server.run("stdio")
