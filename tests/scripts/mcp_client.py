"""Drives `service-rs mcp serve` with the official MCP Python SDK, as an IDE or agent would.

Usage: mcp_client.py <service-rs binary> <bundle reference> <prompt>
Prints one JSON object: the tool names, the list_bundles text, and the run_bundle result.
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main(binary: str, bundle: str, prompt: str) -> None:
    # The whole environment: the SDK would otherwise pass only a few variables, and SERVICE_HOME names the store.
    params = StdioServerParameters(command=binary, args=["mcp", "serve"], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = await session.list_tools()
            listed = await session.call_tool("list_bundles", {})
            ran = await session.call_tool("run_bundle", {"bundle": bundle, "prompt": prompt})
            print(json.dumps({
                "tools": [t.name for t in tools.tools],
                "list_bundles": listed.content[0].text,
                "run_bundle": {
                    "text": ran.content[0].text,
                    "is_error": ran.is_error,
                    "structured": ran.structured_content,
                },
            }))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
