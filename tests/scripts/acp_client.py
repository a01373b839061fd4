"""An ACP client built on the official Python SDK (`agent-client-protocol` on PyPI), for the e2e suite.

It spawns the agent command given after `--`, runs the steps of a plan (JSON, first argument) and prints a JSON
transcript on stdout: for each step, what the agent answered and every update and permission question it sent
meanwhile. The Rust tests (tests/tests/suite/acp.rs) decide what the transcript must show.

Steps:
  {"op": "initialize"}
  {"op": "new", "cwd": DIR, "mcp_servers": [...]}       the session id is kept for later steps
  {"op": "load", "session": ID, "cwd": DIR}                ID defaults to the kept one
  {"op": "resume", "cwd": DIR} / {"op": "list"} / {"op": "close"}
  {"op": "set_mode", "mode": "read-only"}
  {"op": "prompt", "text": T, "answers": ["allow_once", ...], "cancel_after": KIND, "attach": {"uri", "text"}}
      answers are given to permission questions in order; cancel_after sends session/cancel once an update of
      that kind arrives (and answers any question then open `cancelled`, as the protocol asks)
  {"op": "prompt_twice", "text": T}                       a second prompt while the first runs
"""

import asyncio
import json
import os
import sys

import acp
from acp import schema


def dump(model):
    return model.model_dump(by_alias=True, exclude_none=True, mode="json")


class Recorder:
    def __init__(self):
        self.updates = []
        self.questions = []
        self.answers = []
        self.cancel_after = None
        self.cancel = None
        self.cancelled = False

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        self.questions.append({"tool_call": dump(tool_call), "options": [dump(o) for o in options]})
        if self.cancelled or not self.answers:
            return schema.RequestPermissionResponse(outcome=schema.DeniedOutcome(outcome="cancelled"))
        choice = self.answers.pop(0)
        if choice == "cancel":
            self.cancelled = True
            await self.cancel()
            return schema.RequestPermissionResponse(outcome=schema.DeniedOutcome(outcome="cancelled"))
        return schema.RequestPermissionResponse(
            outcome=schema.AllowedOutcome(option_id=choice, outcome="selected")
        )

    async def session_update(self, session_id, update, **kwargs):
        item = dump(update)
        self.updates.append(item)
        if self.cancel_after and item.get("sessionUpdate") == self.cancel_after and not self.cancelled:
            self.cancelled = True
            await self.cancel()

    async def write_text_file(self, *args, **kwargs):
        raise acp.RequestError(-32601, "the test client offers no file system")

    async def read_text_file(self, *args, **kwargs):
        raise acp.RequestError(-32601, "the test client offers no file system")


async def main():
    plan = json.loads(sys.argv[1])
    command = sys.argv[sys.argv.index("--") + 1 :]
    recorder = Recorder()
    transcript = []
    session = None
    # The SDK starts agents with a minimal environment (the agent needs the test's SERVICE_HOME) and a stderr pipe
    # it never reads: the agent's stderr goes to the test instead.
    async with acp.spawn_agent_process(
        recorder, command[0], *command[1:], env=dict(os.environ), transport_kwargs={"stderr": None}
    ) as (conn, process):
        async def cancel():
            await conn.cancel(session_id=session)

        recorder.cancel = cancel
        for step in plan:
            op = step["op"]
            recorder.updates, recorder.questions = [], []
            recorder.answers = list(step.get("answers", []))
            recorder.cancel_after = step.get("cancel_after")
            recorder.cancelled = False
            entry = {"op": op}
            try:
                if op == "initialize":
                    result = await conn.initialize(
                        protocol_version=acp.PROTOCOL_VERSION,
                        client_capabilities=schema.ClientCapabilities(
                            fs=schema.FileSystemCapabilities(read_text_file=True, write_text_file=True),
                            terminal=True,
                        ),
                        client_info=schema.Implementation(name="sdk-test-client", version="1"),
                    )
                elif op == "new":
                    servers = [schema.McpServerStdio(**s) for s in step.get("mcp_servers", [])]
                    result = await conn.new_session(cwd=step["cwd"], mcp_servers=servers)
                    session = result.session_id
                elif op == "load":
                    session = step.get("session", session)
                    result = await conn.load_session(cwd=step["cwd"], session_id=session, mcp_servers=[])
                elif op == "resume":
                    result = await conn.resume_session(cwd=step["cwd"], session_id=session, mcp_servers=[])
                elif op == "list":
                    result = await conn.list_sessions()
                elif op == "close":
                    result = await conn.close_session(session_id=session)
                elif op == "set_mode":
                    result = await conn.set_session_mode(session_id=session, mode_id=step["mode"])
                elif op == "prompt":
                    blocks = [acp.text_block(step["text"])]
                    if "attach" in step:
                        resource = acp.embedded_text_resource(step["attach"]["uri"], step["attach"]["text"])
                        blocks.append(acp.resource_block(resource))
                    result = await conn.prompt(session_id=session, prompt=blocks)
                elif op == "prompt_twice":
                    first = asyncio.create_task(
                        conn.prompt(session_id=session, prompt=[acp.text_block(step["text"])])
                    )
                    await asyncio.sleep(0.5)
                    try:
                        await conn.prompt(session_id=session, prompt=[acp.text_block("second")])
                        entry["second"] = {"result": "accepted"}
                    except acp.RequestError as e:
                        entry["second"] = {"error": {"code": e.code, "message": str(e), "data": e.data}}
                    result = await first
                else:
                    raise SystemExit(f"unknown op {op}")
                entry["result"] = dump(result) if result is not None else None
            except acp.RequestError as e:
                entry["error"] = {"code": e.code, "message": str(e), "data": e.data}
            except Exception as e:  # a client-side failure is part of the transcript, for the test to show
                entry["exception"] = repr(e)
            entry["updates"] = recorder.updates
            entry["questions"] = recorder.questions
            entry["session"] = session
            transcript.append(entry)
    print(json.dumps(transcript))


asyncio.run(main())
