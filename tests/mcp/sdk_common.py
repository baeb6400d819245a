"""What the MCP Python SDK test clients share (`client.py`, `client_modes.py`): the report
of a call, a sampling callback that says what it was asked, and an expected error."""

from mcp import MCPError, types


def text_of(result):
    return "\n".join(b.text for b in result.content if getattr(b, "type", None) == "text")


def call_report(result):
    return {
        "is_error": result.is_error,
        "text": text_of(result),
        "structured": result.structured_content,
    }


async def sampling(context, params):
    asked = " | ".join(
        f"{m.role}:{m.content.text}" for m in params.messages if getattr(m.content, "type", "") == "text"
    )
    return types.CreateMessageResult(
        role="assistant",
        content=types.TextContent(type="text", text=f"sampled[{asked}] max={params.max_tokens}"),
        model="sdk-test-model",
        stop_reason="endTurn",
    )


async def expect_error(coro):
    try:
        await coro
    except MCPError as e:
        return {"code": e.error.code, "message": e.error.message}
    return None
