import { renderMarkdown } from "./markdown.js";

// The chat view: turns the journal's events into a transcript. Text only ever enters the page as text nodes, so
// nothing a model or a command writes can become markup.

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = text;
  return e;
}

// A unified diff as text lines, `-` and `+` lines marked by class; model text never becomes markup.
function diffBlock(diff) {
  const pre = el("pre", "diff");
  for (const line of diff.split("\n")) {
    const kind = line.startsWith("+++") || line.startsWith("---") ? "file"
      : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : line.startsWith("@@") ? "hunk" : "ctx";
    pre.append(el("span", kind, line + "\n"));
  }
  return pre;
}

function block(cls, summary, open) {
  const d = el("details", "block " + cls);
  d.open = !!open;
  const s = el("summary");
  s.append(...summary);
  d.append(s);
  return d;
}

function badge(text, cls) {
  return el("span", "badge " + (cls || ""), text);
}

// How a tool call reads comes from the supervisor's shared renderer (`facade::tool_text`, used by the TUI, `run`
// and ACP too): the event stream is opened with `view=true`, and each tool event carries its line as `view.title`.
// Free text keeps its own words; only the sandbox's name for the session's directory (`root`, the turn's cwd) is
// replaced, so no line here shows it.

/** Free text with the sandbox's name for the directory replaced: relative paths, or `host` when given. */
export function unsandboxed(text, root, host) {
  if (typeof text !== "string" || !root || root === "/") return text ?? "";
  const esc = root.replace(/[.*+?^${}()|[\]\\]/g, "\\$&");
  return text.replace(new RegExp(esc + "(/|(?![\\w.-]))", "g"), (_, slash) => (host ? host + slash : slash ? "" : "."));
}

/**
 * Renders the events of one session into `root`; `onDecision(requestId, decision)` answers approvals, and
 * `onRewind(turn)` rewinds the session to before turn `turn` (from 1).
 */
export class Chat {
  constructor(root, onDecision, onRewind, hostDir) {
    this.root = root;
    // The session's directory on the host, named where the sandbox would say /workspace.
    this.hostDir = hostDir || "";
    this.cwd = "/workspace";
    this.onDecision = onDecision;
    this.onRewind = onRewind;
    this.count = 0; // turns so far, numbered from 1 as `sessions show` numbers them
    this.turns = new Map(); // turn_id -> {node, answer, reasoning, plan, cwd}
    this.calls = new Map(); // call_id -> {node, body, status}
    this.execs = new Map(); // exec_id -> {node, out, summary}
    this.approvals = new Map(); // request_id -> card
    this.subagents = new Map(); // child_session_id -> {node, status}
    this.running = null;
    this.pending = null; // {node, text}: deltas not yet in the page
  }

  /** Puts buffered text into the page: one text node per batch of deltas, not one per delta. */
  flush() {
    if (this.pending) {
      this.pending.node.append(this.pending.text);
      this.pending = null;
    }
  }

  write(node, text) {
    if (this.pending && this.pending.node !== node) this.flush();
    if (!this.pending) this.pending = { node, text: "" };
    this.pending.text += text;
  }

  turn(id) {
    let t = this.turns.get(id);
    if (!t) {
      t = { node: el("article", "turn"), answer: null, reasoning: null, plan: null, cwd: "" };
      t.node.dataset.turn = id;
      this.root.append(t.node);
      this.turns.set(id, t);
    }
    return t;
  }

  /** The container an event of `turnId` goes into: its turn, or the transcript for operator commands. */
  home(turnId) {
    return turnId ? this.turn(turnId).node : this.root;
  }

  apply(msg) {
    const { type, payload: p } = msg.payload;
    if (type !== "agent_message_delta" && type !== "reasoning_delta" && type !== "exec_command_output_delta") this.flush();
    const handler = this["on_" + type];
    if (handler) handler.call(this, p || {}, msg);
  }

  on_turn_started(p) {
    const t = this.turn(p.turn_id);
    t.cwd = p.context?.cwd || "";
    if (t.cwd) this.cwd = t.cwd;
    const n = ++this.count;
    const user = el("div", "msg user");
    const who = el("span", "who", `You · turn ${n}`);
    if (this.onRewind) {
      const back = el("button", "rewind link", "Rewind to here");
      back.type = "button";
      back.title = `Restore the files and cut the conversation to before turn ${n}`;
      back.addEventListener("click", () => this.onRewind(n));
      who.append(" ", back);
    }
    user.append(who, el("p", "text", p.prompt ?? ""));
    t.node.append(user);
    this.running = p.turn_id;
  }

  answer(t) {
    if (!t.answer) {
      const msg = el("div", "msg agent");
      msg.append(el("span", "who", "Agent"));
      t.answer = el("div", "text");
      msg.append(t.answer);
      t.node.append(msg);
    }
    return t.answer;
  }

  on_agent_message_delta(p) {
    const t = this.turn(p.turn_id);
    this.write(this.answer(t), p.delta ?? "");
  }

  on_reasoning_delta(p) {
    const t = this.turn(p.turn_id);
    if (!t.reasoning) {
      const d = block("reasoning", ["Reasoning"], false);
      t.reasoning = el("pre", "out");
      d.append(t.reasoning);
      t.node.append(d);
    }
    this.write(t.reasoning, p.delta ?? "");
  }

  on_reasoning_section_break(p) {
    const t = this.turn(p.turn_id);
    if (t.reasoning) t.reasoning.append("\n\n");
  }

  on_tool_call_started(p, msg) {
    const t = this.turn(p.turn_id);
    const status = badge("running", "run");
    const title = el("code", null, msg.view?.title ?? p.tool ?? "");
    // Open while it runs, so its command's output shows as it streams.
    const d = block("tool", [title, " ", status], true);
    const body = el("div", "tool-body");
    body.append(el("pre", "args", JSON.stringify(p.arguments, null, 2)));
    d.append(body);
    t.node.append(d);
    t.answer = null; // text after a tool call starts a new message
    this.calls.set(p.call_id, { node: d, body, status, title, tool: p.tool });
  }

  on_tool_call_delta(p) {
    const c = this.calls.get(p.call_id);
    if (c) c.body.append(el("p", "muted", unsandboxed(p.delta ?? "", this.cwd)));
  }

  on_tool_call_finished(p, msg) {
    const c = this.calls.get(p.call_id);
    if (!c) return;
    // The outcome: `Edited calc.py (+1 -1)`, `Read calc.py (40 lines)`, `denied: $ rm -rf build`.
    if (msg.view?.title) c.title.textContent = msg.view.title;
    c.status.textContent = p.status;
    c.status.className = "badge " + (p.status === "ok" ? "ok" : "bad");
    // An edit shows its change, also when a rule let it through without a question.
    if (p.diff) c.body.append(diffBlock(unsandboxed(p.diff, this.cwd)));
    // A command's output is already above, as it streamed.
    if (c.tool === "Bash" && c.ran) return;
    const out = el("pre", "out result", unsandboxed(p.output ?? "", this.cwd));
    c.body.append(el("span", "label", "Result"), out);
  }

  /** A hook that decided something gets a line under its turn, as the terminal says it. */
  on_hook_finished(p, msg) {
    if (!p.decision || !msg.view?.title) return;
    this.home(p.turn_id).append(el("p", "muted hook", msg.view.title));
  }

  on_exec_command_begin(p) {
    const call = p.call_id && this.calls.get(p.call_id);
    if (call) call.ran = true;
    const parent = call?.body || this.home(p.turn_id);
    const code = badge("running", "run");
    const d = block("exec", ["$ ", el("code", null, p.command), " ", code], true);
    d.append(el("p", "muted cwd", "in " + unsandboxed(p.cwd ?? "", this.cwd, this.hostDir)));
    const out = el("pre", "out");
    d.append(out);
    parent.append(d);
    this.execs.set(p.exec_id, { node: d, out, code });
  }

  on_exec_command_output_delta(p) {
    const x = this.execs.get(p.exec_id);
    if (!x) return;
    if (p.stream === "stderr") {
      this.flush();
      x.out.append(el("span", "stderr", p.chunk));
    } else {
      this.write(x.out, p.chunk ?? "");
    }
  }

  on_exec_command_output_truncated(p) {
    const x = this.execs.get(p.exec_id);
    if (x) x.out.append(el("span", "muted", `\n[output over ${p.limit_bytes} bytes not shown]`));
  }

  on_exec_command_end(p) {
    const x = this.execs.get(p.exec_id);
    if (!x) return;
    const ok = p.exit_code === 0;
    x.code.textContent = p.exit_code === null || p.exit_code === undefined
      ? (p.timed_out ? "timed out" : "killed")
      : `exit ${p.exit_code} · ${p.duration_ms} ms`;
    x.code.className = "badge " + (ok ? "ok" : "bad");
    x.node.dataset.exit = String(p.exit_code);
    if (ok && x.out.textContent.length > 2000) x.node.open = false;
  }

  approvalCard(p, what) {
    // Inside the paused tool call when there is one, so the question sits beside what it is about.
    const parent = (p.call_id && this.calls.get(p.call_id)?.body) || this.turn(p.turn_id).node;
    const card = el("div", "approval");
    card.setAttribute("role", "group");
    card.setAttribute("aria-label", "Approval needed");
    card.dataset.request = p.request_id;
    card.append(el("strong", null, "Approval needed"));
    const dl = el("dl");
    for (const [k, v] of what) {
      if (v === undefined || v === null || v === "") continue;
      dl.append(el("dt", null, k), el("dd", null, v));
    }
    card.append(dl);
    if (p.warning) card.append(el("p", "error", `warning: ${unsandboxed(p.warning, this.cwd)}`));
    if (p.diff) card.append(diffBlock(unsandboxed(p.diff, this.cwd)));
    const actions = el("div", "actions");
    // A denial may say why: the model reads it in the call's result ("use pytest instead").
    const why = el("input", "reason");
    why.type = "text";
    why.maxLength = 2000;
    why.placeholder = "Why deny? (optional, the model reads it)";
    why.setAttribute("aria-label", "Reason for denying");
    const choices = [["allow_once", "Allow once", ""], ["allow_always", "Allow always", "secondary"]];
    if (p.project_rule) choices.push(["allow_project", `Always ${unsandboxed(p.project_rule, this.cwd)} in this project`, "secondary"]);
    choices.push(["deny", "Deny", "danger"]);
    for (const [decision, label, cls] of choices) {
      const b = el("button", cls, label);
      b.type = "button";
      b.dataset.decision = decision;
      b.addEventListener("click", () => {
        for (const x of actions.querySelectorAll("button")) x.disabled = true;
        const reason = decision === "deny" && why.value.trim() ? why.value.trim() : undefined;
        this.onDecision(p.request_id, decision, reason).catch((e) => {
          for (const x of actions.querySelectorAll("button")) x.disabled = false;
          card.append(el("p", "error", e.message));
        });
      });
      actions.append(b);
    }
    actions.append(why);
    card.append(actions);
    parent.append(card);
    this.approvals.set(p.request_id, card);
    // The buttons must be in view, not below the fold of a long turn.
    actions.scrollIntoView?.({ block: "nearest" });
    return card;
  }

  on_permission_requested(p) {
    const t = this.turn(p.turn_id);
    this.approvalCard(p, [["Subagent session", p.child_session_id], ["Tool", p.tool],
      [p.tool === "Bash" ? "Command" : "Argument", p.tool === "Bash" ? p.summary : unsandboxed(p.summary, this.cwd)],
      ["Directory", unsandboxed(t.cwd || this.cwd, this.cwd, this.hostDir)], ["Rule", unsandboxed(p.rule, this.cwd)]]);
  }

  // A subagent shows folded under its Agent call, with its state; its own transcript is its session's.
  on_subagent_started(p) {
    const parent = this.calls.get(p.call_id)?.body || this.turn(p.turn_id).node;
    const status = badge("working", "run");
    const d = block("subagent", ["Subagent ", el("b", null, p.subagent), " ", status], false);
    d.dataset.child = p.child_session_id;
    const open = el("a", "open-child", "Open its session");
    open.href = `/ui/sessions/${encodeURIComponent(p.child_session_id)}`;
    open.dataset.nav = "";
    d.append(el("p", "muted", `Session ${p.child_session_id}`), open);
    parent.append(d);
    this.subagents.set(p.child_session_id, { node: d, status });
  }

  on_subagent_finished(p) {
    const s = this.subagents.get(p.child_session_id);
    if (!s) return;
    const u = p.usage || {};
    s.status.textContent = `${p.outcome} · ${(u.input_tokens ?? 0) + (u.output_tokens ?? 0)} tokens`;
    s.status.className = "badge " + (p.outcome === "completed" ? "ok" : "bad");
  }

  on_network_permission_requested(p) {
    this.approvalCard(p, [["Connection to", `${p.host}:${p.port}`], ["Addresses", (p.addresses || []).join(", ")],
      ["Warning", p.internal ? "an internal address: approving exposes a service on the server's side" : ""]]);
  }

  on_approval_resolved(p) {
    const card = this.approvals.get(p.request_id);
    if (!card) return;
    card.classList.add("resolved");
    card.querySelector(".actions")?.remove();
    const said = { allow_once: "Allowed once", allow_always: "Allowed always", allow_project: "Allowed in this project", deny: "Denied" }[p.decision] || "Answered";
    card.querySelector("strong").textContent = said;
    card.setAttribute("aria-label", said);
    card.append(badge(p.decision.replace("_", " "), p.decision === "deny" ? "bad" : "ok"));
    if (p.reason) card.append(el("p", "muted", `said: ${p.reason}`));
  }

  on_plan_update(p) {
    const t = this.turn(p.turn_id);
    if (!t.plan) {
      t.plan = el("div", "plan");
      t.node.append(t.plan);
    }
    t.plan.replaceChildren(el("strong", null, "Plan"));
    if (p.explanation) t.plan.append(el("p", "muted", p.explanation));
    const ul = el("ul");
    for (const item of p.plan || []) {
      const li = el("li", "step " + item.status);
      li.append(el("span", "check", item.status === "completed" ? "☑" : item.status === "in_progress" ? "◐" : "☐"), " ", item.step);
      li.setAttribute("aria-label", `${item.step}: ${item.status.replace("_", " ")}`);
      ul.append(li);
    }
    t.plan.append(ul);
  }

  on_turn_completed(p) {
    const t = this.turn(p.turn_id);
    if (!t.answer && p.final_message) this.answer(t).append(p.final_message);
    // Streamed as text, drawn as markdown once whole (see markdown.js: no model text becomes markup).
    if (t.answer) {
      this.flush();
      renderMarkdown(t.answer, t.answer.textContent);
      t.answer.classList.add("md");
    }
    const u = p.usage || {};
    t.node.append(el("p", "turn-end muted", `completed · ${u.input_tokens ?? 0} in, ${u.output_tokens ?? 0} out`));
    this.done(p.turn_id);
  }

  on_error(p) {
    const parent = this.home(p.turn_id);
    const e = el("div", "msg error-msg");
    e.setAttribute("role", "alert");
    e.append(el("strong", null, p.code === "interrupted" ? "Interrupted" : `Error: ${p.code}`), " ", p.message ?? "");
    parent.append(e);
    if (p.turn_id) this.done(p.turn_id);
  }

  on_model_retry(p) {
    this.turn(p.turn_id).node.append(el("p", "muted notice", `retrying the model (${p.attempt}/${p.max_attempts}): ${p.reason}`));
  }

  on_network_access(p) {
    if (p.decision === "deny") this.home(p.turn_id).append(el("p", "muted notice", `network: refused ${p.host}:${p.port} (${p.reason ?? "no rule"})`));
  }

  on_mcp_server_failed(p) {
    this.root.append(el("p", "error notice", `MCP server ${p.server} failed: ${p.message}`));
  }

  on_context_compacted(p) {
    const note = `context compacted (${p.reason}): ${p.summarised_turns} turns summarised, ~${p.before_tokens} → ~${p.after_tokens} tokens`;
    this.root.append(el("p", "muted notice", note));
  }

  on_session_rewound(p) {
    const what = [p.files ? `${p.restored} files restored` : "", p.conversation ? "conversation cut" : ""].filter(Boolean);
    this.root.append(el("p", "muted notice", `rewound to before turn ${p.to_turn}: ${what.join(", ")}`));
  }

  on_session_forked(p) {
    this.root.append(el("p", "muted notice",
      `forked from session ${p.from_session} before its turn ${p.turn} (workspace ${p.workspace}); the turns above are inherited`));
  }

  on_checkpoint_created(p) {
    if (p.dropped?.length) {
      this.root.append(el("p", "muted notice", `checkpoints of ${p.dropped.length} older turns dropped to stay within checkpoint_max_mb`));
    }
    if (p.note) this.root.append(el("p", "muted notice", p.note));
  }

  on_a2a_agent_failed(p) {
    this.root.append(el("p", "error notice", `A2A agent ${p.agent} is not offered: ${p.message}`));
  }

  done(turnId) {
    if (this.running === turnId) this.running = null;
    for (const [id, card] of this.approvals) {
      if (card.closest(".turn")?.dataset.turn === turnId && !card.classList.contains("resolved")) {
        card.querySelector(".actions")?.remove();
        card.classList.add("resolved");
        this.approvals.delete(id);
      }
    }
  }
}
