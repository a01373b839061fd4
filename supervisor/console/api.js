// The HTTP API as the console uses it: JSON calls with the bearer token, and the event stream read with fetch so
// that the token travels in a header, never in a URL.

const TOKEN_KEY = "service-rs.token";

export class Unauthorized extends Error {}

/** The server's error, from its {"error": {code, message}} body. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

export function token() {
  return sessionStorage.getItem(TOKEN_KEY);
}

export function setToken(value) {
  if (value) sessionStorage.setItem(TOKEN_KEY, value);
  else sessionStorage.removeItem(TOKEN_KEY);
}

function headers(extra = {}) {
  const h = { ...extra };
  const t = token();
  if (t) h.Authorization = `Bearer ${t}`;
  return h;
}

async function failure(resp) {
  if (resp.status === 401) return new Unauthorized("the server refused the token");
  let body = null;
  try {
    body = await resp.json();
  } catch {
    // not JSON: keep the status
  }
  const err = body && body.error;
  return new ApiError(resp.status, err ? err.code : "http_" + resp.status,
    err ? err.message : `HTTP ${resp.status}`);
}

/** One JSON call; throws Unauthorized on 401 and ApiError on any other failure. */
export async function call(method, path, body) {
  const init = { method, headers: headers(), cache: "no-store" };
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  if (!resp.ok) throw await failure(resp);
  return resp.status === 204 ? null : resp.json();
}

/**
 * Follows a session's events from after `seq` (0: the whole journal), calling `onEvent(data)` with each event's
 * JSON text (parsing is left to the caller, which spreads it over frames), and reconnecting with Last-Event-ID
 * after a network failure. Returns a function that stops it.
 */
export function follow(sessionId, seq, onEvent, onState) {
  const stop = new AbortController();
  let last = seq;
  let delay = 250;
  const run = async () => {
    while (!stop.signal.aborted) {
      try {
        const resp = await fetch(`/sessions/${encodeURIComponent(sessionId)}/events?after=${last}&view=true`, {
          headers: headers({ Accept: "text/event-stream", "Last-Event-ID": String(last) }),
          signal: stop.signal,
          cache: "no-store",
        });
        if (!resp.ok) throw await failure(resp);
        onState("live");
        delay = 250;
        await readFrames(resp.body, (id, data) => {
          const n = Number(id);
          if (n > last) {
            last = n;
            onEvent(data);
          }
        });
      } catch (e) {
        if (stop.signal.aborted) return;
        if (e instanceof Unauthorized || (e instanceof ApiError && e.status < 500 && e.status !== 429)) {
          onState("closed", e);
          return;
        }
      }
      if (stop.signal.aborted) return;
      onState("reconnecting");
      await new Promise((r) => setTimeout(r, delay));
      delay = Math.min(delay * 2, 5000);
    }
  };
  run();
  return () => stop.abort();
}

/** Parses text/event-stream frames (id and data lines; comments skipped) from a byte stream. */
async function readFrames(body, onFrame) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let id = "";
  let data = [];
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    // One pass over the chunk, one slice at the end: a replay arrives in large chunks of many frames.
    let start = 0;
    let nl;
    while ((nl = buffer.indexOf("\n", start)) >= 0) {
      let line = buffer.slice(start, nl);
      start = nl + 1;
      if (line.endsWith("\r")) line = line.slice(0, -1);
      if (line === "") {
        if (data.length) onFrame(id, data.join("\n"));
        data = [];
      } else if (line.startsWith("id:")) {
        id = line.slice(3).trim();
      } else if (line.startsWith("data:")) {
        data.push(line.slice(5).replace(/^ /, ""));
      }
    }
    buffer = buffer.slice(start);
  }
}
