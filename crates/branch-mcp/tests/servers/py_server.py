"""A small MCP server written with the Python `mcp` SDK (FastMCP), for
branch-mcp's tests. Usage: py_server.py stdio | http PORT | sse PORT."""

import asyncio
import os
import sys

import anyio
from pydantic import BaseModel, Field

from mcp.server.fastmcp import Context, FastMCP, Image
from mcp.shared.exceptions import UrlElicitationRequiredError
from mcp.types import ElicitRequestURLParams

transport = sys.argv[1] if len(sys.argv) > 1 else "stdio"
port = int(sys.argv[2]) if transport != "stdio" else 0
mcp = FastMCP("py-test", host="127.0.0.1", port=port)
# Background tasks the tools start, kept so they are not collected early.
pending = []


class Sum(BaseModel):
    total: int


@mcp.tool()
def echo(text: str) -> str:
    """Returns the text it was given."""
    return text


@mcp.tool()
def add(a: int, b: int) -> Sum:
    """Adds two integers (structured output)."""
    return Sum(total=a + b)


@mcp.tool()
def fail(message: str) -> str:
    """Always fails with the message."""
    raise ValueError(message)


@mcp.tool()
def pixel() -> Image:
    """A one-pixel PNG."""
    png = bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000154a24f5d0000000049454e44ae426082"
    )
    return Image(data=png, format="png")


@mcp.tool()
def huge(size: int) -> str:
    """Returns `size` bytes of text."""
    return "x" * size


@mcp.tool()
async def slow(seconds: float, marker: str, ctx: Context) -> str:
    """Sleeps, reporting progress; writes `marker` when cancelled."""
    try:
        steps = 4
        for i in range(steps):
            await ctx.report_progress(i, steps, f"step {i}")
            await anyio.sleep(seconds / steps)
        return "done"
    except BaseException:
        with open(marker, "w") as f:
            f.write("cancelled")
        raise


@mcp.tool()
def die() -> str:
    """Ends the server process in the middle of the call."""
    os._exit(3)


@mcp.tool()
async def grow(ctx: Context) -> str:
    """Adds the tool `later` and announces the changed list."""

    def later() -> str:
        """Registered at run time."""
        return "later"

    mcp.add_tool(later, name="later")
    await ctx.session.send_tool_list_changed()
    return "grown"


class Booking(BaseModel):
    name: str = Field(description="Who the table is for", min_length=2)
    guests: int = Field(ge=1, le=12)
    terrace: bool = False


@mcp.tool()
async def book(ctx: Context) -> str:
    """Asks the person for the booking's details (MCP elicitation)."""
    result = await ctx.elicit("Which table?", Booking)
    if result.action == "accept":
        d = result.data
        return f"booked {d.name} for {d.guests}, terrace {d.terrace}"
    return f"not booked: {result.action}"


asked_later_action = []


@mcp.tool()
async def ask_later(ctx: Context) -> str:
    """Returns at once, then puts a question to the person outside any
    request of the client's; `asked_later` tells how it was answered."""
    session = ctx.session

    async def later():
        await anyio.sleep(0.3)
        result = await session.elicit_form("Still there?", {"type": "object", "properties": {}})
        asked_later_action.append(result.action)

    pending.append(asyncio.get_running_loop().create_task(later()))
    return "asked later"


@mcp.tool()
def asked_later() -> str:
    """How the question of `ask_later` was answered, once it was."""
    return asked_later_action[-1] if asked_later_action else "not yet"


@mcp.tool()
async def sign_in(url: str, ctx: Context) -> str:
    """Asks the person to open `url` (MCP elicitation, URL mode), then
    tells the client that step is done."""
    result = await ctx.elicit_url("Sign in to the shop", url, "sign-in-1")
    if result.action == "accept":
        await ctx.session.send_elicit_complete("sign-in-1")
    return f"sign-in: {result.action}"


@mcp.tool()
def pay(url: str = "https://pay.example.com/t/7?session=abc") -> str:
    """Refuses until the person has opened the payment page at `url`
    (-32042)."""
    raise UrlElicitationRequiredError(
        [ElicitRequestURLParams(message="Pay for the table", url=url, elicitationId="pay-7")]
    )


@mcp.resource("memo://notes", mime_type="text/plain")
def notes() -> str:
    """Notes for the context."""
    return "The meeting moved to Thursday."


@mcp.resource("memo://fail/{size}")
def failing(size: str) -> str:
    """Fails with an error message of `size` bytes (a JSON-RPC error)."""
    raise ValueError("x" * int(size))


if transport == "stdio":
    mcp.run(transport="stdio")
elif transport == "http":
    mcp.run(transport="streamable-http")
else:
    mcp.run(transport="sse")
