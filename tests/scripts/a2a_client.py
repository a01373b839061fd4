"""A client of service-rs's A2A routes built on the official `a2a-sdk` Python package, for the e2e suite.

Usage: a2a_client.py BASE_URL TOKEN BUNDLE SCENARIO. It runs one scenario as an orchestrator would and prints a JSON
record of what came back; the Rust tests (tests/tests/suite/a2a.rs) decide what it must show.
"""

import asyncio
import json
import sys

import httpx
from a2a.client import A2ACardResolver, ClientConfig, create_client
from a2a.helpers.proto_helpers import new_data_part, new_message, new_text_message
from a2a.types import a2a_pb2 as pb
from google.protobuf.json_format import MessageToDict

base, token, bundle, scenario = sys.argv[1:5]
agent_url = f"{base}/a2a/{bundle}"
out = {}


def user_text(text, context_id=None, task_id=None):
    msg = new_text_message(text, context_id=context_id, task_id=task_id, role=pb.Role.ROLE_USER)
    return pb.SendMessageRequest(message=msg)


def decision(value, task_id):
    msg = new_message([new_data_part({"decision": value})], task_id=task_id, role=pb.Role.ROLE_USER)
    return pb.SendMessageRequest(message=msg)


def event(ev):
    """One stream event, in a form the tests compare."""
    kind = ev.WhichOneof("payload")
    if kind == "task":
        return {"kind": "task", "state": pb.TaskState.Name(ev.task.status.state), "id": ev.task.id,
                "text": "".join(p.text for a in ev.task.artifacts for p in a.parts)}
    if kind == "status_update":
        status = ev.status_update.status
        record = {"kind": "status", "state": pb.TaskState.Name(status.state)}
        if status.HasField("message"):
            record["text"] = [p.text for p in status.message.parts if p.HasField("text")]
            record["data"] = [MessageToDict(p)["data"] for p in status.message.parts if p.HasField("data")]
        return record
    if kind == "artifact_update":
        u = ev.artifact_update
        return {"kind": "artifact", "text": "".join(p.text for p in u.artifact.parts),
                "append": u.append, "last": u.last_chunk}
    return {"kind": kind}


async def client(http, streaming=True, polling=False):
    card = await A2ACardResolver(http, agent_url).get_agent_card()
    return await create_client(card, ClientConfig(httpx_client=http, streaming=streaming, polling=polling))


async def collect(stream, events, stop_after=None):
    async for ev in stream:
        events.append(event(ev))
        if stop_after is not None and len(events) >= stop_after:
            break


def error_of(e):
    return {"type": type(e).__name__, "message": str(e)}


async def main():
    http = httpx.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    if scenario == "card":
        card = await A2ACardResolver(httpx.AsyncClient(), agent_url).get_agent_card()
        out["card"] = MessageToDict(card)
    elif scenario == "conversation":
        c = await client(http, streaming=False)
        first = [ev async for ev in c.send_message(user_text("remember the word tulip", context_id="ctx-tulip"))]
        task = first[0].task
        out["first"] = {"state": pb.TaskState.Name(task.status.state), "context": task.context_id,
                        "answer": "".join(p.text for a in task.artifacts for p in a.parts)}
        second = [ev async for ev in c.send_message(user_text("count the messages", context_id="ctx-tulip"))]
        out["second"] = {"state": pb.TaskState.Name(second[0].task.status.state),
                         "answer": "".join(p.text for a in second[0].task.artifacts for p in a.parts),
                         "history": len(second[0].task.history)}
        listed = await c.list_tasks(pb.ListTasksRequest(context_id="ctx-tulip"))
        out["listed"] = [t.id for t in listed.tasks]
        out["task_ids"] = [task.id, second[0].task.id]
        got = await c.get_task(pb.GetTaskRequest(id=task.id))
        out["got"] = {"state": pb.TaskState.Name(got.status.state), "history": len(got.history)}
        try:
            await c.get_task(pb.GetTaskRequest(id="no-such-task"))
        except Exception as e:  # noqa: BLE001 - the test reads the type
            out["unknown_task"] = error_of(e)
    elif scenario == "stream":
        c = await client(http)
        events = []
        await collect(c.send_message(user_text("say hello slowly")), events)
        out["events"] = events
    elif scenario == "approve":
        c = await client(http)
        events = []
        await collect(c.send_message(user_text("write the file")), events)
        out["asked"] = events
        task_id = events[0]["id"]
        answered = []
        await collect(c.send_message(decision("allow_once", task_id)), answered)
        out["answered"] = answered
    elif scenario == "cancel":
        c = await client(http, streaming=False, polling=True)
        started = [ev async for ev in c.send_message(user_text("sleep a while"))]
        task_id = started[0].task.id
        for _ in range(100):
            await asyncio.sleep(0.1)
            if (await c.get_task(pb.GetTaskRequest(id=task_id))).status.state == pb.TaskState.TASK_STATE_WORKING:
                break
        await asyncio.sleep(1.0)
        canceled = await c.cancel_task(pb.CancelTaskRequest(id=task_id))
        out["canceled"] = pb.TaskState.Name(canceled.status.state)
        try:
            await c.cancel_task(pb.CancelTaskRequest(id=task_id))
        except Exception as e:  # noqa: BLE001
            out["again"] = error_of(e)
    elif scenario == "resubscribe":
        c = await client(http)
        dropped = []
        await collect(c.send_message(user_text("say hello slowly")), dropped, stop_after=2)
        out["dropped"] = dropped
        task_id = dropped[0]["id"]
        await asyncio.sleep(0.5)
        resumed = []
        await collect(c.subscribe(pb.SubscribeToTaskRequest(id=task_id)), resumed)
        out["resumed"] = resumed
        final = await c.get_task(pb.GetTaskRequest(id=task_id))
        out["final"] = "".join(p.text for a in final.artifacts for p in a.parts)
        try:
            await collect(c.subscribe(pb.SubscribeToTaskRequest(id=task_id)), [])
        except Exception as e:  # noqa: BLE001
            out["ended"] = error_of(e)
    elif scenario == "wrong-token":
        bad = httpx.AsyncClient(headers={"Authorization": "Bearer wrong"}, timeout=30)
        c = await client(bad, streaming=False)
        try:
            [ev async for ev in c.send_message(user_text("hello"))]
        except Exception as e:  # noqa: BLE001
            out["refused"] = error_of(e)
    print(json.dumps(out))


asyncio.run(main())
