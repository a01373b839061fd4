// The console: sign-in, the bundle and session lists, and one open session (chat and events) at a time, with
// the address bar following along (/ui/sessions/{id}) so links, reloads and the back button work.

import { call, follow, setToken, token, Unauthorized } from "./api.js";
import { Chat } from "./chat.js";
import { Inspector } from "./inspector.js";

const $ = (id) => document.getElementById(id);

const state = {
  sessions: [],
  bundles: [],
  open: null, // {id, chat, inspector, stop}
  queue: [], // event JSON texts not yet applied, from `head` on
  head: 0,
  draining: false,
};

function show(id, visible) {
  $(id).hidden = !visible;
}

function ago(iso) {
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return `${Math.floor(s)} s ago`;
  if (s < 3600) return `${Math.floor(s / 60)} min ago`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ago`;
  return new Date(iso).toLocaleDateString();
}

// ---- sign-in -------------------------------------------------------------------------------------------------

async function signIn(e) {
  e.preventDefault();
  setToken($("token").value.trim());
  $("login-error").textContent = "";
  try {
    await start();
  } catch (err) {
    if (!(err instanceof Unauthorized)) $("login-error").textContent = err.message;
  }
}

function askToken(message) {
  setToken(null);
  state.open?.stop();
  state.open = null;
  show("app", false);
  show("logout", false);
  show("login", true);
  $("login-error").textContent = message || "";
  $("token").value = "";
  $("token").focus();
}

/** Runs `f`; a 401 anywhere sends the user back to sign-in. */
async function guarded(f) {
  try {
    return await f();
  } catch (e) {
    if (e instanceof Unauthorized) {
      askToken(token() ? "That token was refused. Check it and try again." : "");
      return undefined;
    }
    throw e;
  }
}

// ---- lists ---------------------------------------------------------------------------------------------------

/** The line a list shows when it has nothing to show. */
function emptyRow(text) {
  const li = document.createElement("li");
  li.className = "muted";
  li.textContent = text;
  return li;
}

async function loadBundles() {
  state.bundles = await call("GET", "/bundles");
  const select = $("bundle");
  const chosen = select.value;
  select.replaceChildren(...state.bundles.map((b) => {
    const o = document.createElement("option");
    o.value = b.reference;
    o.textContent = b.reference;
    return o;
  }));
  // A new session starts on the store's default bundle (`default_bundle` in config.toml), which the list marks.
  const match = state.bundles.find((b) => b.reference === chosen) || state.bundles.find((b) => b.default);
  if (match) select.value = match.reference;
  renderBundles();
}

function renderBundles() {
  const q = $("filter").value.trim().toLowerCase();
  const rows = (state.bundles || []).filter((b) => !q || [b.reference, b.description].some((v) => (v || "").toLowerCase().includes(q)));
  const list = $("bundles");
  list.replaceChildren(...rows.map((b) => {
    const li = document.createElement("li");
    const name = document.createElement("strong");
    name.textContent = b.reference;
    const desc = document.createElement("span");
    desc.className = "muted";
    desc.textContent = b.description || b.digest?.slice(0, 19) || "";
    li.append(name, desc);
    return li;
  }));
  if (!rows.length) list.append(emptyRow(q ? "No bundle matches." : "No bundles installed: service-rs build <dir> on the server."));
}

async function loadSessions() {
  state.sessions = await call("GET", "/sessions");
  renderSessions();
}

function renderSessions() {
  const q = $("filter").value.trim().toLowerCase();
  const rows = state.sessions
    .filter((s) => !q || [s.id, s.title, s.cwd, s.bundle_ref, s.bundle?.id, s.status].some((v) => (v || "").toLowerCase().includes(q)))
    .sort((a, b) => (b.updated_at || "").localeCompare(a.updated_at || ""));
  const list = $("sessions");
  list.replaceChildren(...rows.map((s) => {
    const li = document.createElement("li");
    const a = document.createElement("a");
    a.href = `/ui/sessions/${encodeURIComponent(s.id)}`;
    a.dataset.nav = "";
    a.dataset.session = s.id;
    if (state.open?.id === s.id) a.setAttribute("aria-current", "page");
    const title = document.createElement("strong");
    title.textContent = s.title || "(no prompt yet)";
    const meta = document.createElement("span");
    meta.className = "muted";
    const state_ = s.status === "waiting for approval" ? s.status : s.active_turn ? "running" : s.last_turn?.status || s.status;
    const turns = s.turn_count === 1 ? "1 turn" : `${s.turn_count} turns`;
    meta.textContent = `${s.bundle?.id || s.bundle_ref} · ${s.cwd || ""} · ${state_} · ${turns} · ${ago(s.updated_at)} · ${s.id.slice(0, 8)}`;
    a.append(title, meta);
    li.append(a);
    return li;
  }));
  if (!rows.length) list.append(emptyRow(q ? "No session matches." : "No sessions yet."));
}

async function createSession(e) {
  e.preventDefault();
  $("new-error").textContent = "";
  const body = { bundle_ref: $("bundle").value };
  const cwd = $("cwd").value.trim();
  if (cwd) body.cwd = cwd;
  try {
    const record = await guarded(() => call("POST", "/sessions", body));
    if (!record) return;
    state.sessions.push(record);
    navigate(`/ui/sessions/${encodeURIComponent(record.id)}`);
  } catch (err) {
    $("new-error").textContent = err.message;
  }
}

// ---- the open session ----------------------------------------------------------------------------------------

function setRunning(running) {
  $("interrupt").disabled = !running;
  $("compact").disabled = running;
  $("session-state").textContent = running ? "running" : "idle";
  $("session-state").className = "badge " + (running ? "run" : "ok");
}

/** Keeps the open session's line in the list as its events say, between reloads of the list; true if it changed. */
function follows(id, msg) {
  const s = state.sessions.find((x) => x.id === id);
  const { type, payload: p } = msg.payload;
  if (!s) return false;
  switch (type) {
    case "turn_started":
      s.active_turn = p.turn_id;
      if (!s.title) s.title = (p.prompt || "").split("\n")[0].slice(0, 80);
      return true;
    case "permission_requested":
    case "network_permission_requested":
      s.status = "waiting for approval";
      return true;
    case "approval_resolved":
      s.status = "running";
      return true;
    case "turn_completed":
    case "error":
      if (!p.turn_id) return false;
      s.active_turn = null;
      s.status = "idle";
      return true;
    default:
      return false;
  }
}

/** Applies queued events in slices of ~10 ms per frame, so a replay of 10,000 events never freezes the page. */
function drain() {
  if (state.draining) return;
  state.draining = true;
  const step = () => {
    const open = state.open;
    let patched = false;
    const until = performance.now() + 10;
    while (open && state.head < state.queue.length && performance.now() < until) {
      const msg = JSON.parse(state.queue[state.head++]);
      if (msg.session_id !== open.id) continue;
      open.chat.apply(msg);
      open.inspector.push(msg);
      patched = follows(open.id, msg) || patched;
    }
    if (patched) renderSessions();
    if (open) {
      open.chat.flush();
      const running = !!open.chat.running;
      // A turn that just ended changes the session's line in the list.
      if (open.wasRunning && !running) guarded(loadSessions).catch(() => {});
      open.wasRunning = running;
      setRunning(running);
      // Scrolling costs a layout of the transcript; during a replay, once at its end.
      if (open.stick && state.head === state.queue.length) open.scroller.scrollTop = open.scroller.scrollHeight;
    }
    if (state.head < state.queue.length) {
      requestAnimationFrame(step);
    } else {
      state.queue = [];
      state.head = 0;
      state.draining = false;
    }
  };
  requestAnimationFrame(step);
}

function openSession(id) {
  if (state.open?.id === id) return;
  state.open?.stop();
  state.queue = [];
  state.head = 0;
  const transcript = $("transcript");
  transcript.replaceChildren();
  const record = state.sessions.find((s) => s.id === id);
  const chat = new Chat(transcript, (requestId, decision, reason) =>
    guarded(() => call("POST", `/approvals/${encodeURIComponent(requestId)}`, reason ? { decision, reason } : { decision })),
    (turn) => rewind(id, turn), record?.cwd);
  if (!state.inspector) state.inspector = new Inspector($("events"), $("event-detail"), $("events-count"));
  state.inspector.reset();
  const open = { id, chat, inspector: state.inspector, scroller: transcript, stick: true, stop: () => {} };
  transcript.onscroll = () => {
    open.stick = transcript.scrollTop + transcript.clientHeight >= transcript.scrollHeight - 40;
  };
  state.open = open;
  $("session-title").textContent = record ? `${record.bundle_ref} · ${id.slice(0, 8)}` : id.slice(0, 8);
  show("empty", false);
  show("session", true);
  setRunning(false);
  renderSessions();
  open.stop = follow(id, 0, (data) => {
    state.queue.push(data);
    drain();
  }, (s, err) => {
    $("server-status").textContent = s === "live" ? "" : s === "reconnecting" ? "reconnecting…" : err?.message || "";
    if (err instanceof Unauthorized) askToken("That token was refused. Check it and try again.");
  });
  $("prompt").focus();
}

function closeSession() {
  state.open?.stop();
  state.open = null;
  show("session", false);
  show("empty", true);
  renderSessions();
}

async function send(e) {
  e.preventDefault();
  const prompt = $("prompt").value;
  if (!state.open || !prompt.trim()) return;
  $("send").disabled = true;
  try {
    await guarded(() => call("POST", `/sessions/${encodeURIComponent(state.open.id)}/run`, { input: { prompt } }));
    $("prompt").value = "";
    state.open.stick = true;
  } catch (err) {
    $("server-status").textContent = err.message;
  } finally {
    $("send").disabled = false;
  }
}

async function interrupt() {
  if (!state.open) return;
  try {
    await guarded(() => call("POST", `/sessions/${encodeURIComponent(state.open.id)}/interrupt`));
  } catch (err) {
    $("server-status").textContent = err.message;
  }
}

async function compact() {
  if (!state.open) return;
  try {
    const done = await guarded(() => call("POST", `/sessions/${encodeURIComponent(state.open.id)}/compact`, {}));
    if (done && !done.compacted) $("server-status").textContent = "nothing to compact: no turns older than the ones kept";
  } catch (err) {
    $("server-status").textContent = err.message;
  }
}

async function rewind(id, turn) {
  if (!confirm(`Restore the workspace's files and cut the conversation to before turn ${turn}? The journal keeps everything.`)) return;
  try {
    await guarded(() => call("POST", `/sessions/${encodeURIComponent(id)}/rewind`, { turn }));
  } catch (err) {
    $("server-status").textContent = err.message;
  }
}

function selectTab(events) {
  $("tab-chat").setAttribute("aria-selected", String(!events));
  $("tab-events").setAttribute("aria-selected", String(events));
  $("tab-chat").tabIndex = events ? -1 : 0;
  $("tab-events").tabIndex = events ? 0 : -1;
  show("chat-panel", !events);
  show("events-panel", events);
  if (events) state.inspector?.schedule();
}

// ---- routing -------------------------------------------------------------------------------------------------

function route() {
  const m = location.pathname.match(/^\/ui\/sessions\/([^/]+)$/);
  if (m) openSession(decodeURIComponent(m[1]));
  else closeSession();
}

function navigate(path) {
  if (location.pathname !== path) history.pushState(null, "", path);
  route();
}

async function start() {
  const health = await call("GET", "/healthz");
  // Ask for the token before any call that needs it, rather than after two that fail.
  if (health.token_required && !token()) {
    askToken("");
    return;
  }
  const ok = await guarded(async () => {
    await Promise.all([loadBundles(), loadSessions()]);
    return true;
  });
  if (!ok) return;
  $("server-status").textContent = "";
  document.title = `service-rs ${health.version}`;
  show("login", false);
  show("app", true);
  show("logout", !!token());
  route();
}

function wire() {
  $("login-form").addEventListener("submit", signIn);
  $("logout").addEventListener("click", () => askToken(""));
  $("new-session").addEventListener("submit", createSession);
  $("filter").addEventListener("input", () => {
    renderSessions();
    renderBundles();
  });
  $("composer").addEventListener("submit", send);
  $("prompt").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) send(e);
  });
  $("interrupt").addEventListener("click", interrupt);
  $("compact").addEventListener("click", compact);
  $("tab-chat").addEventListener("click", () => selectTab(false));
  $("tab-events").addEventListener("click", () => selectTab(true));
  for (const tab of [$("tab-chat"), $("tab-events")]) {
    tab.addEventListener("keydown", (e) => {
      if (e.key === "ArrowLeft" || e.key === "ArrowRight") {
        const events = tab.id === "tab-chat";
        selectTab(events);
        $(events ? "tab-events" : "tab-chat").focus();
      }
    });
  }
  document.addEventListener("click", (e) => {
    const a = e.target.closest("a[data-nav]");
    if (!a || e.ctrlKey || e.metaKey || e.shiftKey || e.button !== 0) return;
    e.preventDefault();
    navigate(new URL(a.href).pathname);
  });
  window.addEventListener("popstate", route);
  // The lists follow other clients' changes.
  setInterval(() => {
    if (!$("app").hidden) guarded(loadSessions).catch(() => {});
  }, 5000);
}

wire();
start().catch((e) => {
  $("server-status").textContent = `cannot reach the server: ${e.message}`;
});
