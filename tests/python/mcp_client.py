"""Drives `lachesis mcp` with the official MCP Python SDK, as an agent would.

    python mcp_client.py LACHESIS_BIN ENV_NAME

Lists the tools and their input schemas, then selects ENV_NAME, edits a field, starts the demo
workflow, checks status (twice: the second answer is rate limited), stops the run and reads the
results. Prints one JSON object with what each step answered; the Rust test asserts on it.
"""
import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def text(result):
    """The JSON text a tool answered."""
    return json.loads(result.content[0].text)


async def main(binary, env_name):
    params = StdioServerParameters(command=binary, args=["mcp"], env=dict(os.environ))
    out = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = (await session.list_tools()).tools
            schema = lambda t: getattr(t, "input_schema", None) or getattr(t, "inputSchema", None)
            out["tools"] = {t.name: schema(t) for t in tools}
            call = lambda name, args=None: session.call_tool(name, args or {})
            out["environments"] = text(await call("rl_list_environments"))
            out["select"] = text(await call("rl_select_environment", {"name": env_name}))
            out["edit"] = text(await call("rl_edit_config", {"field": "group_size", "value": 8}))
            out["edit_locked"] = text(await call("rl_edit_config", {"field": "total_steps", "value": 5}))
            out["config"] = text(await call("rl_get_current_config"))
            out["start"] = text(await call("rl_start_training", {"workflow": "demo"}))
            run_id = out["start"]["run_id"]
            # Wait (with a deadline) until the daemon has the run up.
            status = {}
            for _ in range(200):
                status = text(await call("rl_list_runs"))
                if status["runs"] and status["runs"][0]["status"] in ("running", "completed"):
                    break
                await asyncio.sleep(0.05)
            out["status"] = text(await call("rl_check_status", {"run_id": run_id}))
            out["status_again"] = text(await call("rl_check_status", {"run_id": run_id}))
            out["stop"] = text(await call("rl_stop_training", {"run_id": run_id}))
            for _ in range(300):
                results = text(await call("rl_get_results", {"run_id": run_id}))
                if results["status"] in ("stopped", "completed", "failed") and all(
                        s["state"] not in ("spawning", "starting", "up") for s in results["stages"]):
                    break
                await asyncio.sleep(0.05)
            out["results"] = results
            out["unknown"] = text(await call("rl_check_status", {"run_id": "ffffffff"}))
            out["health"] = text(await call("rl_health_check"))
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2]))
