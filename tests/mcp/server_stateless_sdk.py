"""An MCP stdio server written with the official MCP Python SDK (mcp 2.3.0), for the host's
2026-07-28 tests (`tests/host_mcp_modern.rs`) and `executa bench` in both eras.

The SDK's stdio server speaks both eras: a client that opens with `server/discover` gets
the stateless revision (2026-07-28), one that opens with `initialize` the handshake. Its
`ask` tool samples the client's model through a resolver (`Resolve(...)` returning
`Sample`), which the SDK turns into an `InputRequiredResult` in the stateless era and into
a `sampling/createMessage` request to the client in the handshake era.
"""

import sys
import warnings
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.resolve import Resolve, Sample
from mcp.types import CreateMessageResult, SamplingMessage, TextContent

# Sampling is deprecated as of 2026-07-28 (SEP-2577) but still reachable: not our business.
warnings.simplefilter("ignore")

server = MCPServer(
    name="pystateless",
    instructions="An MCP server of both eras for executa's host tests.",
    version="2.6.0",
)


def ask_model(question: str) -> Sample:
    return Sample(
        [SamplingMessage(role="user", content=TextContent(type="text", text=question))],
        max_tokens=64,
        system_prompt="Answer briefly.",
    )


@server.tool(description="Returns its text.")
async def echo(text: str) -> str:
    return text


@server.tool(description="Adds integers.")
async def add(numbers: list[int]) -> int:
    return sum(numbers)


@server.tool(description="Asks the client's model (sampling), in either era.")
async def ask(question: str, answer: Annotated[CreateMessageResult, Resolve(ask_model)]) -> str:
    content = answer.content
    text = content.text if isinstance(content, TextContent) else str(content)
    return f"{answer.model}|{text}"


@server.tool(description="Fails with the given message.")
async def fail(message: str) -> str:
    raise ToolError(message)


if __name__ == "__main__":
    print("pystateless: serving on stdio", file=sys.stderr, flush=True)
    server.run("stdio")
