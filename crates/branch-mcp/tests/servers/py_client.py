"""An MCP client written with the Python `mcp` SDK: starts the server given
on the command line over stdio, lists its tools, calls `ask` once asking
for progress, and prints {"tools": [...], "is_error": ..., "result": [...],
"progress": [[progress, message], ...]} as JSON.
Usage: py_client.py QUESTION COMMAND [ARGS...]"""

import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main():
    question, command, args = sys.argv[1], sys.argv[2], sys.argv[3:]
    params = StdioServerParameters(command=command, args=args, env={})
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
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
            }))


asyncio.run(main())
