"""An MCP client written with the Python `mcp` SDK: starts the server given
on the command line over stdio (or reaches the Streamable HTTP server at
URL, with `Authorization: Bearer $MCP_TOKEN` when that is set), lists its
tools, calls `ask` once asking for progress, and prints {"tools": [...],
"is_error": ..., "result": [...], "progress": [[progress, message], ...]}
as JSON. With MCP_ELICIT set (comma-separated: a choice's value, or
`decline` / `cancel`), the client declares it shows forms and answers the
server's questions in that order; each question is reported under
"elicited" as [message, [the choices' values]]. A question with any
other form (a tool server's, passed on) is answered with MCP_FORM: a JSON
object to accept with, or `decline` / `cancel`; it is reported as
[message, [the form's fields]]. An address to open is answered with
MCP_URL (`accept`, `decline` or `cancel`; `decline` when unset) and
reported as [message, url, elicitationId].
Usage: py_client.py QUESTION COMMAND [ARGS...] | py_client.py QUESTION --url URL"""

import asyncio
import contextlib
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamablehttp_client


@contextlib.asynccontextmanager
async def connected(target):
    if target[0] == "--url":
        token = os.environ.get("MCP_TOKEN")
        headers = {"Authorization": f"Bearer {token}"} if token else None
        async with streamablehttp_client(target[1], headers=headers) as (read, write, _):
            yield read, write
    else:
        params = StdioServerParameters(command=target[0], args=target[1:], env={})
        async with stdio_client(params) as (read, write):
            yield read, write


async def main():
    question, target = sys.argv[1], sys.argv[2:]
    answers = [a for a in os.environ.get("MCP_ELICIT", "").split(",") if a]
    elicited = []

    async def elicit(context, params):
        if getattr(params, "mode", "form") == "url":
            elicited.append([params.message, params.url, params.elicitationId])
            return types.ElicitResult(action=os.environ.get("MCP_URL", "decline"))
        schema = params.requestedSchema
        if "decision" not in schema["properties"]:
            elicited.append([params.message, list(schema["properties"])])
            form = os.environ.get("MCP_FORM", "cancel")
            if form in ("decline", "cancel"):
                return types.ElicitResult(action=form)
            return types.ElicitResult(action="accept", content=json.loads(form))
        field = schema["properties"]["decision"]
        values = field.get("enum") or [c["const"] for c in field.get("oneOf", [])]
        elicited.append([params.message, values])
        answer = answers.pop(0) if answers else "cancel"
        if answer in ("decline", "cancel"):
            return types.ElicitResult(action=answer)
        return types.ElicitResult(action="accept", content={"decision": answer})

    callback = elicit if os.environ.get("MCP_ELICIT") is not None else None
    async with connected(target) as (read, write):
        async with ClientSession(read, write, elicitation_callback=callback) as session:
            await session.initialize()
            tools = await session.list_tools()
            progress = []

            async def heard(value, total, message):
                progress.append([value, message])

            result = await session.call_tool(
                "ask", {"question": question}, progress_callback=heard
            )
            print(json.dumps({
                "tools": [t.name for t in tools.tools],
                "is_error": result.isError,
                "result": [c.text for c in result.content if c.type == "text"],
                "progress": progress,
                **({"elicited": elicited} if callback else {}),
            }))


asyncio.run(main())
