"""A client of service-rs's OpenAI-compatible routes built on the official `openai` Python SDK, for the e2e suite.

Usage: openai_client.py BASE_URL TOKEN MODEL. It runs the SDK calls a chat UI makes and prints a JSON record of what
came back; the Rust tests (tests/tests/suite/openai_facade.rs) decide what it must show.
"""

import json
import sys

import openai

base, token, model = sys.argv[1], sys.argv[2], sys.argv[3]
client = openai.OpenAI(base_url=base, api_key=token, max_retries=0)
out = {}

out["models"] = [m.id for m in client.models.list().data]

raw = client.chat.completions.with_raw_response.create(
    model=model,
    messages=[
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "remember the word tulip"},
        {"role": "assistant", "content": "noted"},
        {"role": "user", "content": "say hello"},
    ],
)
completion = raw.parse()
session = raw.headers.get("x-service-session")
out["plain"] = {
    "text": completion.choices[0].message.content,
    "finish": completion.choices[0].finish_reason,
    "usage": completion.usage.model_dump(),
    "session": session,
}

stream = client.chat.completions.create(
    model=model,
    messages=[{"role": "user", "content": "say hello"}],
    stream=True,
    stream_options={"include_usage": True},
)
deltas, finish, usage = [], None, None
for chunk in stream:
    if chunk.usage is not None:
        usage = chunk.usage.model_dump()
    for choice in chunk.choices:
        if choice.delta.content:
            deltas.append(choice.delta.content)
        if choice.finish_reason:
            finish = choice.finish_reason
out["stream"] = {"deltas": deltas, "finish": finish, "usage": usage}

again = client.chat.completions.with_raw_response.create(
    model=model,
    messages=[{"role": "user", "content": "say hello again"}],
    extra_headers={"x-service-session": session},
)
out["continued"] = {
    "text": again.parse().choices[0].message.content,
    "session": again.headers.get("x-service-session"),
}

events, first_id, streamed = [], None, ""
with client.responses.stream(
    model=model,
    input=[{"role": "user", "content": "say hello"}],
    instructions="Answer in French.",
) as stream:
    for event in stream:
        events.append(event.type)
        if event.type == "response.output_text.delta":
            streamed += event.delta
    final = stream.get_final_response()
    first_id = final.id
second = client.responses.create(model=model, input="say hello again", previous_response_id=first_id)
out["responses"] = {
    "events": events,
    "streamed": streamed,
    "final_text": final.output_text,
    "usage_total": final.usage.total_tokens,
    "first_id": first_id,
    "second_text": second.output_text,
    "second_previous": second.previous_response_id,
    "second_id": second.id,
}

try:
    client.chat.completions.create(model="no-such-bundle", messages=[{"role": "user", "content": "x"}])
except openai.NotFoundError as e:
    out["unknown_model"] = {"status": e.status_code, "code": e.code, "message": e.message}

try:
    openai.OpenAI(base_url=base, api_key="wrong", max_retries=0).models.list()
except openai.AuthenticationError as e:
    out["bad_token"] = {"status": e.status_code, "code": e.code}

print(json.dumps(out))
