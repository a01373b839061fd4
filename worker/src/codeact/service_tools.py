"""The bundle's tools for a program of the codeact executor.

Each function is one tool call, made by the worker exactly as a JSON tool call is: the same permission rules,
approvals and events. It returns the text the tool returned. A call that a rule or the operator refuses raises
Denied; one that fails raises ToolError. final_answer(text) ends the turn with that answer.

The worker runs a program as `python3 service_tools.py program.py`, with the tool channel as the descriptor
SERVICE_TOOLS_FD. Frames go both ways as a 4-byte big-endian length and a body: a request's body is a JSON object,
a reply's the status ("ok", "denied" or "error"), a newline and the tool's text.
"""

import json
import json.encoder
import os
import select
import socket
import struct
import sys
import time

__all__ = [
    "Denied", "ToolError", "call", "read", "write", "edit", "bash", "glob", "grep", "skill", "update_plan", "web_fetch",
    "agent", "final_answer",
]


class Denied(Exception):
    """A permission rule of agent.yaml, or the operator, refused the call."""


class ToolError(Exception):
    """The tool could not run, or ran and failed; the message is what it returned."""


_channel = socket.socket(fileno=int(os.environ["SERVICE_TOOLS_FD"]))
_HEAD = struct.Struct(">I")
_pending = bytearray()
_ready = select.poll()
_ready.register(_channel, select.POLLIN)
# A reply usually comes within tens of microseconds: polling that long first saves the cost of being woken, which
# on a virtual machine is most of a call's round trip. Each round asks poll(2), which is cheaper than a failed
# non-blocking recv (that raises an exception), then yields the CPU, to the worker where the scheduler put both on
# one. Past the poll the program sleeps until the reply.
_POLL_SECONDS = 0.0002


def _unserializable(value):
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _encoder():
    # json.dumps makes a new encoder for every call, which is half the cost of encoding a small request: the C
    # encoder it makes is built once here instead, where this Python has one (ASCII, compact, circular references
    # refused).
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return json.dumps
    encode = make({}, _unserializable, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, True)
    return lambda value: "".join(encode(value, 0))


_encode = _encoder()


def _reply():
    deadline = time.perf_counter() + _POLL_SECONDS
    # Most replies fit in one small read; one of a large output is read in as few reads as its length allows.
    size = 16384
    while True:
        if len(_pending) >= 4:
            end = 4 + _HEAD.unpack_from(_pending)[0]
            if len(_pending) >= end:
                frame = _pending[4:end]
                del _pending[:end]
                return frame
            size = max(size, end - len(_pending))
        while not _ready.poll(0) and time.perf_counter() < deadline:
            os.sched_yield()
        chunk = _channel.recv(size)
        if not chunk:
            return None
        _pending.extend(chunk)


def _ask(request):
    body = _encode(request).encode()
    try:
        _channel.sendall(_HEAD.pack(len(body)) + body)
    except (BrokenPipeError, ConnectionResetError):
        # The worker closed the channel (the turn is ending, or a request broke its bounds): said as a reply would.
        raise ToolError("the tool channel closed: the turn is ending") from None
    frame = _reply()
    if frame is None:
        raise ToolError("the tool channel closed: the turn is ending")
    status, _, output = frame.partition(b"\n")
    return status, output.decode()


def _call(tool, arguments):
    status, output = _ask({"op": "call", "tool": tool, "arguments": arguments})
    if status == b"ok":
        return output
    if status == b"denied":
        raise Denied(output)
    raise ToolError(output)


def call(tool, **arguments):
    """Calls the tool named `tool` (a builtin such as "Read", or an MCP tool such as "mcp__git__status")."""
    return _call(tool, arguments)


def _given(**arguments):
    return {k: v for k, v in arguments.items() if v is not None}


def read(file_path, offset=None, limit=None):
    """The file's numbered lines (from line `offset`, at most `limit` of them)."""
    return _call("Read", _given(file_path=file_path, offset=offset, limit=limit))


def write(file_path, content):
    """Writes `content` to the file, replacing what it held."""
    return _call("Write", {"file_path": file_path, "content": content})


def edit(file_path, old_string, new_string, replace_all=False):
    """Replaces `old_string` by `new_string` in the file (once, unless `replace_all`)."""
    return _call(
        "Edit",
        {"file_path": file_path, "old_string": old_string, "new_string": new_string, "replace_all": replace_all},
    )


def bash(command, timeout_ms=None):
    """Runs a shell command; its output, with its exit code when it is not 0."""
    return _call("Bash", _given(command=command, timeout_ms=timeout_ms))


def glob(pattern, path=None):
    """The files whose paths match the glob `pattern`, one per line."""
    return _call("Glob", _given(pattern=pattern, path=path))


def grep(pattern, path=None, glob=None):
    """The lines matching the regular expression `pattern`, as path:line:text."""
    return _call("Grep", _given(pattern=pattern, path=path, glob=glob))


def skill(name):
    """The instructions of the named skill."""
    return _call("Skill", {"name": name})


def update_plan(plan, explanation=None):
    """Publishes the plan: a list of {"step": ..., "status": "pending"|"in_progress"|"completed"}."""
    return _call("UpdatePlan", _given(plan=plan, explanation=explanation))


def web_fetch(url, prompt=None):
    """The page at `url` as markdown (text and JSON as they are), fetched through the sandbox's egress proxy."""
    return _call("WebFetch", _given(url=url, prompt=prompt))


def agent(subagent, prompt):
    """Hands `prompt` to a subagent, which works on it in a session of its own; its answer."""
    return _call("Agent", {"subagent": subagent, "prompt": prompt})


def final_answer(text):
    """Ends the turn with `text` as the answer; the program stops here."""
    _ask({"op": "final_answer", "text": str(text)})
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    # The program imports this module by name: let it find this instance, not load a second one.
    sys.modules["service_tools"] = sys.modules["__main__"]
    _path = sys.argv[1]
    with open(_path, encoding="utf-8") as _f:
        _code = compile(_f.read(), "program.py", "exec")
    _scope = {"__name__": "__main__", "__builtins__": __builtins__}
    _scope.update({name: globals()[name] for name in __all__})
    sys.argv = ["program.py"]
    exec(_code, _scope)
