"""An MCP stdio server built with the official Python SDK, for `executa bench --protocol mcp`.

Tools: `echo` (returns its text), `sample` (one `sampling/createMessage` to the client,
returns the answer's text) and `fail` (raises: the result has `isError: true`).
In mcp 2.x the SDK's FastMCP is `mcp.server.mcpserver.MCPServer`.
"""

import warnings

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import SamplingMessage, TextContent

# `create_message` is marked deprecated for the 2026 revision; this server speaks 2025-11-25.
warnings.simplefilter("ignore")

server = MCPServer("bench-python")


# `async`: the SDK runs a plain `def` tool on a worker thread, a hop per call.
@server.tool()
async def echo(text: str) -> str:
    """Returns its text."""
    return text


@server.tool()
async def sample(prompt: str, ctx: Context) -> str:
    """One sampling call to the client's model; returns the answer's text."""
    answer = await ctx.session.create_message(
        [SamplingMessage(role="user", content=TextContent(type="text", text=prompt))],
        max_tokens=64,
    )
    return answer.content.text


@server.tool()
async def fail(message: str) -> str:
    """Fails with the given message."""
    raise ToolError(message)


if __name__ == "__main__":
    server.run("stdio")
