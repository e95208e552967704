// goaai: the chat page. The transcript is rebuilt from the session's event log: the
// WebSocket sends every event after the last sequence number this page has seen
// (0 at first), then live events and token deltas. An event already seen is dropped
// by its seq, so reconnecting never duplicates or wipes anything on screen.
import {
  api,
  announce,
  confirmDialog,
  copyButton,
  copyText,
  el,
  errorText,
  formatDuration,
  formatTime,
  isTyping,
} from "./sessions.js";

const config = JSON.parse(document.getElementById("chat-data").textContent);
const SESSION = config.session.id;
const ME = config.user;
const TERMINAL = new Set(["completed", "failed", "canceled", "timed_out"]);
const LONG_OUTPUT = 1500; // characters of pretty JSON shown before "Show all"

const $ = (selector, root = document) => root.querySelector(selector);
const transcript = $("#transcript");
const composerForm = $("#composer-form");
const composer = $("#composer");
const sendButton = $('[data-role="send"]', composerForm);
const stopButton = $('[data-role="stop"]', composerForm);
const reviewToggle = $('[data-role="review"]', composerForm);
const banner = $("#connection-banner");

const state = {
  seen: 0, // the highest seq applied
  caughtUp: false, // the first backlog has been applied
  sessionStatus: config.session.status,
  runs: new Map(), // run id -> run view
  calls: new Map(), // tool call id -> card
  turns: new Map(), // turn id -> message view
  sending: false,
  pendingSend: null, // {text, key}: an Idempotency-Key kept until the send succeeds
  stopping: new Set(),
  interrupted: new Set(config.open_runs.filter((r) => r.interrupted).map((r) => r.id)),
};

// Rendering helpers

function pretty(value) {
  if (value === undefined) return "";
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

/** A <pre> of JSON with a copy button, truncated with "Show all" when long. */
function jsonBlock(label, value, testid) {
  const full = typeof value === "string" ? value : pretty(value);
  const pre = el("pre", { class: "json", "data-testid": testid });
  const long = full.length > LONG_OUTPUT;
  pre.textContent = long ? `${full.slice(0, LONG_OUTPUT)}…` : full;
  const actions = el("div", { class: "block-actions" }, copyButton(() => full));
  if (long) {
    const more = el("button", { type: "button", class: "button button-small button-ghost", "aria-expanded": "false" }, `Show all (${full.length.toLocaleString()} characters)`);
    more.addEventListener("click", () => {
      const expanded = more.getAttribute("aria-expanded") === "true";
      pre.textContent = expanded ? `${full.slice(0, LONG_OUTPUT)}…` : full;
      more.setAttribute("aria-expanded", String(!expanded));
      more.textContent = expanded ? `Show all (${full.length.toLocaleString()} characters)` : "Show less";
    });
    actions.append(more);
  }
  return el("section", { class: "block" }, el("div", { class: "block-head" }, el("h4", {}, label), actions), pre);
}

function who(userId) {
  if (userId === null || userId === undefined) return "someone";
  if (userId === ME.id) return "you";
  if (userId === config.session.owner.id) return config.session.owner.username;
  return `user #${userId}`;
}

let idCounter = 0;
const uid = (prefix) => `${prefix}-${++idCounter}`;

// Auto-scroll: follow the bottom only while the reader is near it.

let stick = true;
const scrollButton = $('[data-action="scroll-bottom"]');
const nearBottom = () => transcript.scrollHeight - transcript.scrollTop - transcript.clientHeight < 120;
transcript.addEventListener("scroll", () => {
  stick = nearBottom();
  if (stick) scrollButton.hidden = true;
});
let renderQueued = false;
function rendered() {
  if (renderQueued) return;
  renderQueued = true;
  requestAnimationFrame(() => {
    renderQueued = false;
    if (stick) transcript.scrollTop = transcript.scrollHeight;
    else scrollButton.hidden = false;
  });
}
function scrollToBottom() {
  stick = true;
  transcript.scrollTop = transcript.scrollHeight;
  scrollButton.hidden = true;
}
scrollButton.addEventListener("click", scrollToBottom);

function say(text) {
  if (state.caughtUp) announce(text);
}

// Runs

function ensureRun(runId, info = {}) {
  let run = state.runs.get(runId);
  if (run) {
    if (info.input !== undefined && !run.input) setRunInput(run, info.input);
    return run;
  }
  const parentRun = info.parentRun || null;
  run = {
    id: runId,
    parentRun,
    agent: info.agent || config.session.agent,
    input: "",
    labels: info.labels || {},
    status: info.status || "pending",
    activity: "",
    awaiting: null,
    usage: { input_tokens: 0, output_tokens: 0, total_tokens: 0 },
    createdAt: info.createdAt || null,
    startedAt: null,
    endedAt: null,
    output: "",
    error: null,
    messages: [],
    lastGroup: null,
  };
  const stepsId = uid("steps");
  run.statusText = el("span", { class: "run-status-text" });
  run.statusButton = el(
    "button",
    { type: "button", class: "run-status", "aria-expanded": "false", "aria-controls": stepsId, "data-testid": "run-status", title: "Show the steps" },
    el("span", { class: "spinner", "aria-hidden": "true" }),
    run.statusText,
  );
  run.steps = el("ol", { class: "run-steps", id: stepsId, hidden: true, "data-testid": "run-steps" });
  run.statusButton.addEventListener("click", () => {
    const open = run.statusButton.getAttribute("aria-expanded") !== "true";
    run.statusButton.setAttribute("aria-expanded", String(open));
    run.steps.hidden = !open;
  });
  run.usageText = el("span", { class: "run-usage muted", "data-testid": "run-usage" });
  run.body = el("div", { class: "run-body" });
  run.errorBox = el("div", { class: "run-error", role: "alert", hidden: true, "data-testid": "run-error" });
  run.actions = el("span", { class: "run-actions" });
  const statusRow = el("div", { class: "run-status-row" }, run.statusButton, run.usageText, run.actions);
  run.inputText = el("div", { class: "msg-text" });
  if (parentRun) {
    run.el = el(
      "div",
      { class: "run run-child", id: `run-${runId}`, dataset: { runId }, "data-testid": "child-run" },
      el("p", { class: "child-head" }, el("span", { class: "agent-tag" }, run.agent), " was asked: ", run.inputText),
      run.body,
      run.errorBox,
      statusRow,
      run.steps,
    );
    const parent = ensureRun(parentRun);
    // Placed under the parent until run.child_linked names the tool call it answers.
    appendSegment(parent, run.el);
  } else {
    run.actions.append(
      copyButton(() => answerText(run), "Copy"),
      copyButton(() => answerWithTools(run), "Copy with tools"),
    );
    run.el = el(
      "article",
      { class: "run", id: `run-${runId}`, dataset: { runId }, "data-testid": "run", "aria-label": "Exchange" },
      el("div", { class: "msg msg-user", "data-testid": "user-message" }, el("span", { class: "sr-only" }, "You said: "), run.inputText),
      el(
        "div",
        { class: "assistant-block" },
        el("div", { class: "agent-avatar", "aria-hidden": "true" }, "◆"),
        el("div", { class: "assistant-content" }, el("span", { class: "sr-only" }, `${run.agent} answered: `), run.body, run.errorBox, statusRow, run.steps),
      ),
    );
    transcript.append(run.el);
    $('[data-role="intro"]', transcript).hidden = true;
  }
  state.runs.set(runId, run);
  if (info.input !== undefined) setRunInput(run, info.input);
  renderRun(run);
  return run;
}

function setRunInput(run, input) {
  run.input = input;
  run.inputText.textContent = input;
}

function appendSegment(run, node) {
  run.body.append(node);
  run.lastGroup = null;
}

function step(run, text, at, kind = "") {
  run.steps.append(el("li", { class: kind ? `step step-${kind}` : "step" }, el("time", { datetime: at || "" }, formatTime(at)), " ", text));
}

const ACTIVITY = { pending: "Queued…", running: "Thinking…" };

function statusLine(run) {
  if (run.status === "running" && state.interrupted.has(run.id)) {
    return "Interrupted by a server restart. It continues when the engine picks it up…";
  }
  switch (run.status) {
    case "pending":
      return "Queued…";
    case "running":
      if (state.stopping.has(run.id)) return "Stopping…";
      return run.activity || ACTIVITY.running;
    case "awaiting_input": {
      const waiting = waitingFor(run);
      const kind = waiting ? waiting.kind : run.awaiting && run.awaiting.kind;
      const by = waiting && waiting.run !== run ? ` (the ${waiting.run.agent} agent asks)` : "";
      if (kind === "question") return `Waiting for your answer${by}`;
      if (kind === "approval") return `Waiting for your approval${by}`;
      return "Waiting for the agent it asked";
    }
    case "completed": {
      const duration = run.startedAt && run.endedAt ? ` in ${formatDuration(new Date(run.endedAt) - new Date(run.startedAt))}` : "";
      return `Done${duration}`;
    }
    case "failed":
      return "Failed";
    case "canceled":
      return "Stopped";
    case "timed_out":
      return "Timed out";
    default:
      return run.status;
  }
}

function renderRun(run) {
  run.el.dataset.status = run.status;
  run.el.classList.toggle("is-interrupted", state.interrupted.has(run.id) && run.status === "running");
  run.statusText.textContent = statusLine(run);
  const u = run.usage;
  run.usageText.textContent = u.total_tokens ? `${u.total_tokens.toLocaleString()} tokens (${u.input_tokens.toLocaleString()} in · ${u.output_tokens.toLocaleString()} out)` : "";
  run.actions.hidden = !TERMINAL.has(run.status) || !answerText(run);
  if (run.parentRun && state.runs.has(run.parentRun)) renderRun(state.runs.get(run.parentRun));
  else if (state.caughtUp) updateComposer(); // once, at caught_up, while replaying history
}

function answerText(run) {
  if (run.output) return run.output;
  return run.messages.map((m) => m.text).filter(Boolean).join("\n\n");
}

function answerWithTools(run) {
  const lines = [`You: ${run.input}`, ""];
  for (const card of state.calls.values()) {
    if (card.runId !== run.id) continue;
    lines.push(`[tool ${card.name} — ${card.status}] arguments: ${JSON.stringify(card.arguments)}`);
    if (card.error) lines.push(`  error: ${card.error.kind}: ${card.error.message}`);
    else if (card.result !== undefined) lines.push(`  result: ${JSON.stringify(card.result)}`);
  }
  lines.push("", `${run.agent}: ${answerText(run)}`);
  return lines.join("\n");
}

function showRunError(run) {
  const error = run.error || {};
  const title = run.status === "timed_out" ? "The run ran out of time." : "The run failed.";
  const box = run.errorBox;
  box.replaceChildren(
    el("p", { class: "run-error-title" }, el("strong", {}, title), error.kind ? ` (${error.kind})` : ""),
    el("p", { class: "run-error-message" }, error.message || "No reason was given."),
  );
  if (!run.parentRun && run.input) {
    const retry = el("button", { type: "button", class: "button button-small", "data-testid": "retry-button" }, error.retryable ? "Retry (it may work now)" : "Retry");
    retry.addEventListener("click", async () => {
      retry.disabled = true;
      retry.textContent = "Retrying…";
      const ok = await startRun(run.input, run.labels);
      if (!ok) {
        retry.disabled = false;
        retry.textContent = "Retry";
      } else {
        retry.remove();
      }
    });
    box.append(retry);
  }
  box.hidden = false;
}

function settleOpenParts(run, why) {
  for (const card of state.calls.values()) {
    if (card.runId !== run.id) continue;
    if (["scheduled", "running", "awaiting_approval", "awaiting_answer", "approved"].includes(card.status)) {
      card.needsEye = false;
      setCardStatus(card, "canceled");
      if (card.pending) card.pending.settle(why);
    }
  }
  for (const message of run.messages) message.el.classList.remove("is-streaming");
}

// Messages (one buffer per turn)

function turnMessage(run, turnId) {
  let message = state.turns.get(turnId);
  if (message) return message;
  const text = el("div", { class: "msg-text" });
  message = { turnId, run, text: "", completed: false, textEl: text };
  message.el = el("div", { class: "msg msg-assistant is-streaming", dataset: { turnId }, "data-testid": "assistant-message" }, text);
  state.turns.set(turnId, message);
  run.messages.push(message);
  appendSegment(run, message.el);
  return message;
}

function setMessageText(message, text) {
  message.text = text;
  message.textEl.textContent = text;
}

// Tool cards

const CARD_STATE_LABEL = {
  scheduled: "scheduled",
  running: "running",
  succeeded: "succeeded",
  failed: "failed",
  canceled: "canceled",
  awaiting_approval: "needs approval",
  awaiting_answer: "needs your answer",
  approved: "approved",
  denied: "denied",
  answered: "answered",
};

function groupFor(run) {
  if (run.lastGroup) return run.lastGroup;
  const bodyId = uid("group");
  const group = { cards: [], userExpanded: null };
  group.summary = el("span", { class: "group-summary" });
  group.toggle = el("button", { type: "button", class: "group-toggle", "aria-expanded": "true", "aria-controls": bodyId, hidden: true, "data-testid": "tool-group-toggle" }, el("span", { class: "chevron", "aria-hidden": "true" }), group.summary);
  group.body = el("div", { class: "group-body", id: bodyId });
  group.el = el("div", { class: "tool-group", "data-testid": "tool-group" }, group.toggle, group.body);
  group.toggle.addEventListener("click", () => {
    group.userExpanded = group.toggle.getAttribute("aria-expanded") !== "true";
    renderGroup(group);
  });
  run.body.append(group.el);
  run.lastGroup = group;
  return group;
}

const ACTIVE_CARD = new Set(["scheduled", "running", "awaiting_approval", "awaiting_answer", "approved"]);

function renderGroup(group) {
  const many = group.cards.length > 1;
  group.toggle.hidden = !many;
  if (!many) {
    group.body.hidden = false;
    return;
  }
  const counts = new Map();
  for (const c of group.cards) counts.set(c.name, (counts.get(c.name) || 0) + 1);
  const names = Array.from(counts, ([name, n]) => (n > 1 ? `${name} ×${n}` : name));
  const active = group.cards.some((c) => ACTIVE_CARD.has(c.status) || c.needsEye);
  const failed = group.cards.filter((c) => c.status === "failed" || c.status === "denied").length;
  group.summary.textContent = `Used ${group.cards.length} tools: ${names.join(", ")}${failed ? ` (${failed} failed)` : ""}`;
  const expanded = group.userExpanded ?? active;
  group.toggle.setAttribute("aria-expanded", String(expanded));
  group.body.hidden = !expanded;
  group.el.dataset.state = active ? "active" : failed ? "failed" : "done";
}

function ensureCard(toolCallId, runId, info = {}) {
  let card = state.calls.get(toolCallId);
  if (card) return card;
  const run = ensureRun(runId);
  const bodyId = uid("tool");
  card = {
    id: toolCallId,
    runId,
    name: info.name || "tool",
    arguments: info.arguments || {},
    status: "scheduled",
    result: undefined,
    error: null,
    durationMs: null,
    decision: null,
    userExpanded: null,
    needsEye: false,
    pending: null,
  };
  card.stateBadge = el("span", { class: "tool-state", "data-testid": "tool-state" });
  card.durationEl = el("span", { class: "tool-duration muted" });
  card.toggle = el(
    "button",
    { type: "button", class: "tool-toggle", "aria-expanded": "false", "aria-controls": bodyId, "data-testid": "tool-toggle" },
    el("span", { class: "tool-icon", "aria-hidden": "true" }),
    el("span", { class: "tool-name" }, card.name),
    card.stateBadge,
    card.durationEl,
  );
  card.resultArea = el("div", { class: "tool-result" });
  card.argsArea = el("div", { class: "tool-args" });
  card.childArea = el("div", { class: "tool-children" });
  card.decisionEl = el("p", { class: "tool-decision", hidden: true, "data-testid": "tool-decision" });
  card.body = el("div", { class: "tool-body", id: bodyId, hidden: true }, card.decisionEl, card.resultArea, card.argsArea, card.childArea);
  card.actionArea = el("div", { class: "tool-action", hidden: true });
  card.el = el(
    "div",
    { class: "tool-card", dataset: { toolCallId, toolName: card.name, state: "scheduled" }, "data-testid": "tool-card" },
    el("h3", { class: "tool-head" }, card.toggle),
    card.actionArea,
    card.body,
  );
  card.toggle.addEventListener("click", () => {
    card.userExpanded = card.toggle.getAttribute("aria-expanded") !== "true";
    renderCard(card);
  });
  card.group = groupFor(run);
  card.group.cards.push(card);
  card.group.body.append(card.el);
  state.calls.set(toolCallId, card);
  renderArgs(card);
  renderCard(card);
  return card;
}

function renderArgs(card) {
  card.argsArea.replaceChildren(jsonBlock("Arguments", card.arguments, "tool-arguments"));
}

function setCardStatus(card, status) {
  card.status = status;
  renderCard(card);
}

function renderCard(card) {
  card.el.dataset.state = card.status;
  card.stateBadge.textContent = CARD_STATE_LABEL[card.status] || card.status;
  card.durationEl.textContent = card.durationMs !== null && card.durationMs !== undefined ? formatDuration(card.durationMs) : "";
  // A paused call shows its arguments in its approval form: the body stays shut.
  const expanded = card.userExpanded ?? false;
  card.toggle.setAttribute("aria-expanded", String(expanded));
  card.body.hidden = !expanded;
  renderGroup(card.group);
}

function renderOutcome(card) {
  if (card.error) {
    card.resultArea.replaceChildren(
      el("section", { class: "block block-error", "data-testid": "tool-error" }, el("h4", {}, `Error: ${card.error.kind || "error"}`), el("p", {}, card.error.message || "")),
    );
  } else if (card.result !== undefined) {
    card.resultArea.replaceChildren(jsonBlock("Result", card.result, "tool-result"));
  }
}

/** Expand a card and everything around it (a child run's card sits in its parent's). */
function reveal(card) {
  card.needsEye = true;
  renderCard(card);
  let node = card.el.parentElement;
  while (node) {
    const outer = node.closest(".tool-card");
    if (!outer) break;
    const outerCard = state.calls.get(outer.dataset.toolCallId);
    if (outerCard) {
      outerCard.userExpanded = true;
      renderCard(outerCard);
    }
    node = outer.parentElement;
  }
}

function showDecision(card, at) {
  const verb = { approved: "Approved", denied: "Denied", answered: "Answered" }[card.decision] || card.decision;
  const parts = [`${verb} by ${who(card.decidedBy)}`];
  if (at) parts.push(` · ${formatTime(at)}`);
  if (card.reason) parts.push(` — “${card.reason}”`);
  card.decisionEl.textContent = parts.join("");
  card.decisionEl.hidden = false;
  card.actionArea.replaceChildren(el("p", { class: "tool-decision tool-decision-inline", "data-testid": "decision-note" }, parts.join("")));
  card.actionArea.hidden = false;
}

/** The approval or answer form of a paused call, with the states
 * idle → sending → done | expired (409) | error (retry). */
function showPending(card, kind, question) {
  const run = state.runs.get(card.runId);
  const status = el("p", { class: "pending-status", role: "status", "data-testid": "respond-status" });
  let controls;
  const pending = { kind, state: "idle" };
  const setState = (next, message = "") => {
    pending.state = next;
    card.actionArea.dataset.respondState = next;
    status.textContent = message;
    for (const control of controls.querySelectorAll("button, input, textarea")) control.disabled = next === "sending" || next === "done";
  };
  const send = async (body) => {
    if (pending.state === "sending" || pending.state === "done" || pending.state === "expired") return;
    setState("sending", "Sending…");
    const result = await api(`runs/${card.runId}/respond/`, { method: "POST", body: { tool_call: card.id, ...body } });
    if (result.ok) {
      setState("done", kind === "question" ? "Answer sent. The run continues." : "Sent. The run continues.");
    } else if (result.status === 409) {
      pending.settle("This request expired: the run is no longer waiting for it.");
    } else {
      setState("error", `${errorText(result, "That did not work.")} You can try again.`);
    }
  };
  if (kind === "question") {
    const inputId = uid("answer");
    const input = el("textarea", { id: inputId, rows: "2", required: true, "data-testid": "answer-input", maxlength: "32000" });
    controls = el(
      "form",
      { class: "answer-form", "data-testid": "answer-form" },
      el("p", { class: "question", "data-testid": "question" }, question || "The agent asks you something."),
      el("label", { for: inputId }, "Your answer"),
      input,
      el("div", { class: "form-actions" }, el("button", { type: "submit", class: "button button-primary button-small", "data-testid": "answer-button" }, "Send answer")),
    );
    controls.addEventListener("submit", (event) => {
      event.preventDefault();
      if (input.value.trim()) send({ answer: input.value.trim() });
      else input.focus();
    });
    input.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        controls.requestSubmit();
      }
    });
    pending.answer = (text) => send({ answer: text });
  } else {
    const reasonId = uid("reason");
    const reason = el("input", { id: reasonId, type: "text", maxlength: "500", placeholder: "Why? (optional, sent with a denial)", "data-testid": "deny-reason" });
    const approve = el("button", { type: "button", class: "button button-primary button-small", "data-testid": "approve-button" }, "Approve");
    const deny = el("button", { type: "button", class: "button button-danger button-small", "data-testid": "deny-button" }, "Deny");
    approve.addEventListener("click", () => send({ decision: "approve" }));
    deny.addEventListener("click", () => send({ decision: "deny", reason: reason.value.trim() }));
    controls = el(
      "div",
      { class: "approval-form", "data-testid": "approval-form" },
      el("p", { class: "question" }, el("strong", {}, card.name), ` wants to run${run && run.parentRun ? ` (for the ${run.agent} agent)` : ""}. Allow it?`),
      jsonBlock("With these arguments", card.arguments, "approval-arguments"),
      el("div", { class: "field" }, el("label", { for: reasonId }, "Reason for denying"), reason),
      el("div", { class: "form-actions" }, deny, approve),
    );
  }
  pending.settle = (message) => {
    // Gone: the buttons go, the card says why.
    pending.state = "expired";
    card.actionArea.dataset.respondState = "expired";
    card.actionArea.replaceChildren(el("p", { class: "pending-status", "data-testid": "respond-status" }, message));
    if (card.pending === pending) card.pending = null;
  };
  card.pending = pending;
  card.actionArea.replaceChildren(controls, status);
  card.actionArea.hidden = false;
  card.actionArea.dataset.respondState = "idle";
  reveal(card);
}

// Events

const handlers = {
  "session.updated"(event) {
    if (typeof event.data.title === "string") setTitle(event.data.title);
  },
  "session.ended"() {
    setSessionStatus("ended");
  },
  "run.created"(event, run) {
    run.agent = event.data.agent || run.agent;
    run.labels = event.data.labels || {};
    run.createdAt = event.created_at;
    step(run, run.parentRun ? `Asked by its parent run` : `Asked ${run.agent}`, event.created_at);
  },
  "run.started"(event, run) {
    run.status = "running";
    run.startedAt = run.startedAt || event.created_at;
    run.activity = "Thinking…";
    step(run, "Started", event.created_at);
  },
  "turn.started"(event, run) {
    run.activity = "Thinking…";
    step(run, `Turn ${event.data.index + 1}: asked the model (${event.data.model})${event.data.restarted ? " again after a restart" : ""}`, event.created_at);
  },
  "message.completed"(event, run) {
    const message = turnMessage(run, event.data.turn);
    // The complete text replaces whatever the deltas wrote: never appended.
    setMessageText(message, event.data.text || "");
    message.completed = true;
    message.el.classList.remove("is-streaming");
  },
  "turn.completed"(event, run) {
    const message = state.turns.get(event.data.turn);
    if (message) {
      message.el.classList.remove("is-streaming");
      if (!message.text) message.el.remove();
    }
    const calls = event.data.tool_calls ? `, asked for ${event.data.tool_calls} tool call${event.data.tool_calls === 1 ? "" : "s"}` : "";
    step(run, `Turn ${event.data.index + 1}: the model answered in ${formatDuration(event.data.latency_ms)}${calls}`, event.created_at);
  },
  usage(event, run) {
    run.usage.input_tokens += event.data.input_tokens || 0;
    run.usage.output_tokens += event.data.output_tokens || 0;
    run.usage.total_tokens += event.data.total_tokens || 0;
  },
  "tool_call.scheduled"(event, run) {
    const card = ensureCard(event.data.tool_call, run.id, { name: event.data.name, arguments: event.data.arguments });
    card.arguments = event.data.arguments || {};
    card.requiresApproval = Boolean(event.data.requires_approval);
    renderArgs(card);
    step(run, `Scheduled ${event.data.name}${card.requiresApproval ? " (needs approval)" : ""}`, event.created_at);
  },
  "tool_call.approval_requested"(event, run) {
    const card = ensureCard(event.data.tool_call, run.id, event.data);
    setCardStatus(card, "awaiting_approval");
    step(run, `${event.data.name} needs a person's approval`, event.created_at);
  },
  "tool_call.started"(event, run) {
    const card = ensureCard(event.data.tool_call, run.id, event.data);
    card.startedAt = event.created_at;
    setCardStatus(card, "running");
    run.activity = `Running ${event.data.name}…`;
    step(run, `Running ${event.data.name}${event.data.attempt > 1 ? ` (attempt ${event.data.attempt})` : ""}`, event.created_at);
    say(`Running ${event.data.name}`);
  },
  "tool_call.succeeded"(event, run) {
    const card = ensureCard(event.data.tool_call, run.id, event.data);
    card.result = event.data.result;
    card.error = null;
    if (event.data.duration_ms !== undefined) card.durationMs = event.data.duration_ms;
    else if (card.startedAt) card.durationMs = new Date(event.created_at) - new Date(card.startedAt);
    card.needsEye = false;
    renderOutcome(card);
    setCardStatus(card, "succeeded");
    run.activity = "Thinking…";
    step(run, `${event.data.name} succeeded${card.durationMs !== null ? ` in ${formatDuration(card.durationMs)}` : ""}`, event.created_at);
    say(`${event.data.name} finished`);
  },
  "tool_call.failed"(event, run) {
    const card = ensureCard(event.data.tool_call, run.id, event.data);
    card.error = event.data.error || { kind: "error", message: "" };
    card.durationMs = event.data.duration_ms ?? card.durationMs;
    renderOutcome(card);
    setCardStatus(card, "failed");
    run.activity = "Thinking…";
    step(run, `${event.data.name} failed: ${card.error.message || card.error.kind}`, event.created_at, "failed");
    say(`${event.data.name} failed`);
  },
  "tool_call.decided"(event, run) {
    const card = ensureCard(event.data.tool_call, run.id, event.data);
    card.decision = event.data.decision;
    card.decidedBy = event.data.decided_by;
    card.reason = event.data.reason || "";
    card.pending = null;
    card.needsEye = false;
    if (card.decision === "denied") {
      card.error = { kind: "denied", message: card.reason ? `Denied: ${card.reason}` : "Denied." };
      renderOutcome(card);
      setCardStatus(card, "denied");
    } else {
      setCardStatus(card, card.decision === "approved" ? "approved" : "answered");
    }
    showDecision(card, event.created_at);
    step(run, `${event.data.name}: ${event.data.decision} by ${who(card.decidedBy)}`, event.created_at);
  },
  "run.awaiting_input"(event, run) {
    run.status = "awaiting_input";
    run.awaiting = event.data;
    const card = event.data.tool_call ? state.calls.get(event.data.tool_call) : null;
    if (event.data.kind === "question") {
      if (card) {
        setCardStatus(card, "awaiting_answer");
        showPending(card, "question", event.data.question);
      }
      step(run, `Asks you: ${event.data.question || ""}`, event.created_at);
      say(`The agent asks: ${event.data.question || "a question"}`);
    } else if (event.data.kind === "approval") {
      if (card) {
        setCardStatus(card, "awaiting_approval");
        showPending(card, "approval");
      }
      step(run, `Waits for your approval of ${card ? card.name : "a tool call"}`, event.created_at);
      say(`Waiting for your approval: ${card ? card.name : "a tool call"}`);
    } else {
      step(run, "Waits for the agent it asked", event.created_at);
    }
  },
  "run.resumed"(event, run) {
    run.status = "running";
    run.awaiting = null;
    run.activity = "Continuing…";
    const wasInterrupted = state.interrupted.delete(run.id);
    if (event.data.reason === "worker_lost") {
      step(run, "Picked up again after its worker stopped (a server restart)", event.created_at);
      if (wasInterrupted || state.caughtUp) say("The run continues after a restart");
    } else {
      step(run, `Continues${event.data.waited_seconds ? ` after waiting ${formatDuration(event.data.waited_seconds * 1000)}` : ""}`, event.created_at);
    }
  },
  "run.child_linked"(event) {
    const child = state.runs.get(event.data.child_run);
    const card = event.data.parent_tool_call ? state.calls.get(event.data.parent_tool_call) : null;
    if (child && card) {
      card.childArea.append(child.el);
      const parent = state.runs.get(event.run);
      if (parent) parent.lastGroup = card.group;
    }
  },
  "memory.stored"(event, run) {
    if (run) step(run, `Remembered “${event.data.key}” (${event.data.scope})`, event.created_at);
    memory.refreshSoon();
  },
  "memory.deleted"(event, run) {
    if (run) step(run, `Forgot “${event.data.key}” (${event.data.scope})`, event.created_at);
    memory.refreshSoon();
  },
  "policy.decision"(event, run) {
    step(run, `Policy ${event.data.rule}: ${event.data.verdict}${event.data.reason ? ` — ${event.data.reason}` : ""}`, event.created_at, "policy");
  },
  "run.completed"(event, run) {
    run.status = "completed";
    run.endedAt = event.created_at;
    run.output = event.data.output || "";
    if (event.data.usage) run.usage = { ...run.usage, ...event.data.usage };
    if (run.output && !run.messages.some((m) => m.text)) {
      const message = turnMessage(run, `output-${run.id}`);
      setMessageText(message, run.output);
    }
    settleOpenParts(run, "The run ended before this was answered.");
    step(run, "Completed", event.created_at);
    if (!run.parentRun) say(`${run.agent} answered`);
  },
  "run.failed"(event, run) {
    run.status = "failed";
    run.endedAt = event.created_at;
    run.error = event.data.error || event.data;
    settleOpenParts(run, "The run failed before this was answered.");
    showRunError(run);
    step(run, `Failed: ${run.error.message || run.error.kind || ""}`, event.created_at, "failed");
    say("The run failed");
  },
  "run.timed_out"(event, run) {
    run.status = "timed_out";
    run.endedAt = event.created_at;
    run.error = event.data.error || { kind: "timeout", message: event.data.message || "" };
    settleOpenParts(run, "The run ran out of time before this was answered.");
    showRunError(run);
    step(run, "Timed out", event.created_at, "failed");
    say("The run timed out");
  },
  "run.canceled"(event, run) {
    run.status = "canceled";
    run.endedAt = event.created_at;
    state.stopping.delete(run.id);
    settleOpenParts(run, "Canceled: the run was stopped before this was answered.");
    for (const message of run.messages) {
      if (message.text && !message.el.querySelector(".stopped-tag")) message.el.append(el("span", { class: "stopped-tag", "data-testid": "stopped-tag" }, "stopped"));
    }
    step(run, `Stopped${event.data.reason ? ` (${event.data.reason})` : ""}`, event.created_at, "failed");
    say("Stopped");
  },
};

function applyEvent(event) {
  if (typeof event.seq !== "number" || event.seq <= state.seen) return; // seen already
  state.seen = event.seq;
  const handler = handlers[event.type];
  if (!handler) return;
  const info =
    event.type === "run.created"
      ? { input: event.data.input, parentRun: event.data.parent_run, labels: event.data.labels, agent: event.data.agent, createdAt: event.created_at }
      : {};
  const run = event.run ? ensureRun(event.run, info) : null;
  handler(event, run);
  if (run) renderRun(run);
  rendered();
}

function applyDelta(frame) {
  if (!frame.run || !frame.turn) return;
  const known = state.turns.get(frame.turn);
  if (known && known.completed) return; // message.completed already holds the full text
  const run = ensureRun(frame.run);
  const message = turnMessage(run, frame.turn);
  setMessageText(message, message.text + frame.text);
  if (run.status === "running") run.activity = "Writing…";
  renderRun(run);
  rendered();
}

// Header: title, status, end, delete

function setTitle(title) {
  config.session.title = title;
  $("#chat-title").textContent = title || "Untitled chat";
  document.title = `${title || "Chat"} · goaai`;
  const item = document.querySelector(`.session-item[data-session-id="${SESSION}"] [data-role="title"]`);
  if (item && title) item.textContent = title;
}

function setSessionStatus(status) {
  state.sessionStatus = status;
  const badge = $("#session-status");
  badge.textContent = status;
  badge.className = `badge badge-${status}`;
  $('[data-action="end-session"]').hidden = status === "ended";
  updateComposer();
}

const renameForm = $(".rename-form");
const renameInput = $("#rename-input");
function closeRename() {
  renameForm.hidden = true;
  $(".title-row").hidden = false;
  $('[data-action="rename"]').focus();
}
$('[data-action="rename"]').addEventListener("click", () => {
  renameInput.value = config.session.title || "";
  $(".title-row").hidden = true;
  renameForm.hidden = false;
  renameInput.focus();
  renameInput.select();
});
$('[data-action="rename-cancel"]').addEventListener("click", closeRename);
renameInput.addEventListener("keydown", (event) => {
  if (event.key === "Escape") {
    event.preventDefault();
    event.stopPropagation();
    closeRename();
  }
});
renameForm.addEventListener("submit", async (event) => {
  event.preventDefault();
  const title = renameInput.value.trim();
  const result = await api(`sessions/${SESSION}/`, { method: "PATCH", body: { title } });
  if (result.ok) {
    setTitle(result.data.title);
    closeRename();
    announce("Renamed");
  } else {
    window.alert(errorText(result, "The chat could not be renamed."));
  }
});

/** An untitled chat takes its first message as its title (searchable in the list). */
async function nameAfter(text) {
  const title = text.replace(/\s+/g, " ").trim().slice(0, 80);
  config.session.title = title; // at most once, even if the request fails
  const result = await api(`sessions/${SESSION}/`, { method: "PATCH", body: { title } });
  if (result.ok) setTitle(result.data.title);
}

$('[data-action="end-session"]').addEventListener("click", async () => {
  const ok = await confirmDialog("Ending the chat stops anything still running. You can read it and export it afterwards, but not add messages.", { title: "End this chat?", ok: "End chat" });
  if (!ok) return;
  const result = await api(`sessions/${SESSION}/end/`, { method: "POST", body: {} });
  if (result.ok) setSessionStatus("ended");
  else window.alert(errorText(result, "The chat could not be ended."));
});

$('[data-action="delete-this-session"]').addEventListener("click", async () => {
  const ok = await confirmDialog("This chat and everything in it (runs, tool calls, what the agent remembers for it) will be deleted. This cannot be undone.", { title: "Delete this chat?", ok: "Delete" });
  if (!ok) return;
  const result = await api(`sessions/${SESSION}/`, { method: "DELETE" });
  if (result.ok || result.status === 404) window.location.href = config.urls.list;
  else window.alert(errorText(result, "The chat could not be deleted."));
});

// The composer

function activeRun() {
  let found = null;
  for (const run of state.runs.values()) {
    if (!run.parentRun && !TERMINAL.has(run.status)) found = run;
  }
  return found;
}

/** What a waiting run waits for, following a delegation down to the child run
 * that asks: {run, kind, card} or null. */
function waitingFor(run) {
  let current = run;
  for (let depth = 0; current && depth < 8; depth += 1) {
    if (current.status !== "awaiting_input" || !current.awaiting) return null;
    if (current.awaiting.kind !== "delegated") {
      return { run: current, kind: current.awaiting.kind, card: state.calls.get(current.awaiting.tool_call) || null };
    }
    current = state.runs.get(current.awaiting.child_run);
  }
  return null;
}

function pendingQuestion(run) {
  const waiting = run ? waitingFor(run) : null;
  if (!waiting || waiting.kind !== "question" || !waiting.card) return null;
  return waiting.card.pending && waiting.card.pending.kind === "question" ? waiting.card : null;
}

function updateComposer() {
  const note = $('[data-role="note"]', composerForm);
  const ended = state.sessionStatus === "ended";
  const run = activeRun();
  const waiting = run ? waitingFor(run) : null;
  const busy = run && !waiting;
  composer.disabled = ended;
  reviewToggle.disabled = ended;
  sendButton.hidden = Boolean(busy);
  sendButton.disabled = ended || state.sending;
  stopButton.hidden = ended || !run;
  stopButton.disabled = run ? state.stopping.has(run.id) : true;
  stopButton.textContent = run && state.stopping.has(run.id) ? "Stopping…" : "Stop";
  composerForm.dataset.state = ended ? "ended" : busy ? "busy" : run ? "waiting" : "idle";
  const question = pendingQuestion(run);
  sendButton.textContent = question ? "Answer" : "Send";
  note.replaceChildren();
  if (ended) {
    note.append("This chat has ended; it takes no new messages. ", el("a", { href: config.urls.new }, "Start a new chat"));
  } else if (question) {
    note.append(el("strong", {}, "The agent asks: "), waiting.run.awaiting.question || "a question", " — your next message answers it.");
  } else if (waiting && waiting.kind === "approval") {
    note.append("A tool call waits for your approval above. Sending a new message cancels it.");
  }
  note.hidden = !note.childNodes.length;
  composer.placeholder = ended ? "This chat has ended" : question ? "Type your answer…" : `Message ${config.session.agent}…`;
}

function showComposerError(message) {
  const box = $('[data-role="error"]', composerForm);
  box.textContent = message;
  box.hidden = !message;
}

function newKey() {
  if (window.crypto && typeof window.crypto.randomUUID === "function") return window.crypto.randomUUID();
  return `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
}

/** Starts a run; a send that failed on the network is retried with the same
 * Idempotency-Key, so it cannot start the run twice. */
async function startRun(text, labels) {
  const body = { input: text };
  if (labels && Object.keys(labels).length) body.labels = labels;
  const signature = JSON.stringify(body);
  if (!state.pendingSend || state.pendingSend.signature !== signature) state.pendingSend = { signature, key: newKey() };
  const result = await api(`sessions/${SESSION}/runs/`, { method: "POST", body, headers: { "Idempotency-Key": state.pendingSend.key } });
  if (result.ok) {
    state.pendingSend = null;
    showComposerError("");
    const run = ensureRun(result.data.id, { input: result.data.input, labels: result.data.labels, createdAt: result.data.created_at });
    if (run.status === "pending" && result.data.status !== "pending") run.status = result.data.status;
    renderRun(run);
    scrollToBottom();
    return true;
  }
  if (result.status === 409 && result.data && result.data.errors && result.data.errors.some((e) => e.code === "session_ended")) setSessionStatus("ended");
  if (result.status !== 0) state.pendingSend = null;
  showComposerError(errorText(result, "The message could not be sent."));
  return false;
}

async function submitComposer() {
  const text = composer.value.trim();
  if (!text || state.sending || state.sessionStatus === "ended") return;
  const run = activeRun();
  if (run && !waitingFor(run)) return; // it is working: Stop first
  state.sending = true;
  updateComposer();
  try {
    const question = pendingQuestion(run);
    if (question) {
      const result = await api(`runs/${question.runId}/respond/`, { method: "POST", body: { tool_call: question.id, answer: text } });
      if (result.ok) {
        composer.value = "";
        showComposerError("");
        question.pending?.settle?.call(null, "Answered from the message box.");
      } else if (result.status === 409) {
        question.pending?.settle?.call(null, "This question expired.");
        showComposerError("That question is no longer waiting for an answer. Send your message again to start a new request.");
      } else {
        showComposerError(errorText(result, "The answer could not be sent."));
      }
      return;
    }
    if (run && run.status === "awaiting_input") {
      // A new message instead of a decision: the waiting request is canceled.
      await api(`runs/${run.id}/cancel/`, { method: "POST", body: { reason: "the user sent a new message" } });
    }
    const labels = reviewToggle.checked ? { review: "required" } : {};
    if (await startRun(text, labels)) {
      composer.value = "";
      if (!config.session.title) nameAfter(text);
    }
  } finally {
    state.sending = false;
    autosize();
    updateComposer();
  }
}

async function stopRun() {
  const run = activeRun();
  if (!run || state.stopping.has(run.id)) return;
  state.stopping.add(run.id);
  renderRun(run);
  const result = await api(`runs/${run.id}/cancel/`, { method: "POST", body: { reason: "stopped by the user" } });
  if (!result.ok && result.status !== 409) {
    state.stopping.delete(run.id);
    showComposerError(errorText(result, "The run could not be stopped."));
  }
  renderRun(run);
}

function autosize() {
  composer.style.height = "auto";
  composer.style.height = `${Math.min(composer.scrollHeight, 240)}px`;
}

composerForm.addEventListener("submit", (event) => {
  event.preventDefault();
  submitComposer();
});
composer.addEventListener("input", autosize);
composer.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
    event.preventDefault();
    submitComposer();
  } else if (event.key === "Escape" && !event.shiftKey && activeRun()) {
    event.preventDefault();
    stopRun();
  }
});
stopButton.addEventListener("click", stopRun);
for (const chip of document.querySelectorAll("[data-suggestion]")) {
  chip.addEventListener("click", () => {
    composer.value = chip.dataset.suggestion;
    autosize();
    composer.focus();
  });
}

// Memory drawer

const drawer = $("#memory-drawer");
const memoryToggle = $('[data-testid="memory-toggle"]');

const memory = {
  timer: null,
  loaded: false,
  refreshSoon() {
    if (!state.caughtUp) return;
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.load(), 250);
  },
  async load() {
    const [mine, users] = await Promise.all([
      api(`memory/?session=${SESSION}&page_size=200`),
      api("memory/?scope=user&page_size=200"),
    ]);
    const errorBox = $('[data-role="memory-error"]', drawer);
    if (!mine.ok || !users.ok) {
      errorBox.textContent = errorText(mine.ok ? users : mine, "Memory could not be loaded.");
      errorBox.hidden = false;
      return;
    }
    errorBox.hidden = true;
    const sessionEntries = mine.data.results.filter((e) => e.scope === "session");
    // Staff see every user's entries through the API: keep this chat's owner's.
    const userEntries = users.data.results.filter((e) => e.user === config.session.owner.id);
    this.render($('[data-scope="session"]', drawer), sessionEntries, "Nothing remembered for this chat yet.");
    this.render($('[data-scope="user"]', drawer), userEntries, "Nothing remembered across chats yet.");
    const count = sessionEntries.length + userEntries.length;
    $('[data-role="memory-count"]').textContent = count ? String(count) : "";
    this.loaded = true;
  },
  render(listEl, entries, emptyText) {
    // An entry being edited is kept as it is: a refresh must not throw away what the
    // user typed (a save then meets the newer version and says so).
    const editing = new Map(Array.from(listEl.querySelectorAll(".memory-entry.is-editing"), (li) => [li.dataset.entryId, li]));
    listEl.replaceChildren(...entries.map((entry) => editing.get(entry.id) || this.entry(entry)));
    if (!entries.length) listEl.append(el("li", { class: "muted memory-empty" }, emptyText));
  },
  writer(entry) {
    const by = entry.written_by || {};
    if (by.kind === "user") return [who(by.user)];
    if (by.kind === "run" && by.run) {
      const here = state.runs.has(by.run);
      return ["a run ", here ? el("a", { href: `#run-${by.run}` }, "in this chat") : el("span", { class: "mono", title: by.run }, `(${by.run.slice(0, 8)})`)];
    }
    return [by.kind || "the system"];
  },
  display(value) {
    return typeof value === "string" ? value : JSON.stringify(value);
  },
  entry(entry) {
    const valueEl = el("div", { class: "memory-value", "data-testid": "memory-value" }, this.display(entry.value));
    const li = el(
      "li",
      { class: "memory-entry", dataset: { entryId: entry.id, key: entry.key }, "data-testid": "memory-entry" },
      el("div", { class: "memory-head" }, el("span", { class: "memory-key", "data-testid": "memory-key" }, entry.key), el("span", { class: "muted" }, ` v${entry.version}`)),
      valueEl,
      el("p", { class: "memory-meta muted" }, "Written by ", ...this.writer(entry), " · ", el("time", { datetime: entry.updated_at }, formatTime(entry.updated_at))),
    );
    const editId = uid("mem");
    const textarea = el("textarea", { id: editId, rows: "2", "data-testid": "memory-edit-input" });
    textarea.value = this.display(entry.value);
    const message = el("p", { class: "memory-message", role: "status" });
    const form = el(
      "form",
      { class: "memory-form", hidden: true },
      el("label", { for: editId, class: "sr-only" }, `New value of ${entry.key}`),
      textarea,
      el("div", { class: "form-actions" }, el("button", { type: "button", class: "button button-small", dataset: { act: "cancel" } }, "Cancel"), el("button", { type: "submit", class: "button button-primary button-small", "data-testid": "memory-save" }, "Save")),
      message,
    );
    const edit = el("button", { type: "button", class: "button button-small button-ghost", "data-testid": "memory-edit", "aria-label": `Edit ${entry.key}` }, "Edit");
    const remove = el("button", { type: "button", class: "button button-small button-ghost danger", "data-testid": "memory-delete", "aria-label": `Delete ${entry.key}` }, "Delete");
    const actions = el("div", { class: "memory-actions" }, edit, remove);
    li.append(actions, form);
    let version = entry.version;
    const openForm = (open) => {
      form.hidden = !open;
      actions.hidden = open;
      li.classList.toggle("is-editing", open);
      if (open) textarea.focus();
    };
    edit.addEventListener("click", () => openForm(true));
    form.querySelector('[data-act="cancel"]').addEventListener("click", () => {
      openForm(false);
      edit.focus();
    });
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      let value = textarea.value;
      if (typeof entry.value !== "string") {
        try {
          value = JSON.parse(textarea.value);
        } catch {
          value = textarea.value; // not JSON: keep it as text
        }
      }
      const save = form.querySelector('[type="submit"]');
      save.disabled = true;
      message.textContent = "Saving…";
      const result = await api(`memory/${entry.id}/`, { method: "PATCH", body: { value, version } });
      save.disabled = false;
      if (result.ok) {
        message.textContent = "";
        openForm(false);
        this.load();
      } else if (result.status === 409 && result.data && result.data.current) {
        const current = result.data.current;
        version = current.version;
        valueEl.textContent = this.display(current.value);
        message.textContent = `It changed meanwhile: now “${this.display(current.value)}” (version ${current.version}). Save again to replace it with yours.`;
      } else {
        message.textContent = errorText(result, "It could not be saved.");
      }
    });
    remove.addEventListener("click", async () => {
      const ok = await confirmDialog(`The agent will no longer remember “${entry.key}”.`, { title: "Delete this memory?", ok: "Delete" });
      if (!ok) return;
      const result = await api(`memory/${entry.id}/`, { method: "DELETE" });
      if (result.ok || result.status === 404) {
        li.remove();
        announce(`Deleted ${entry.key}`);
        this.load();
      } else {
        window.alert(errorText(result, "It could not be deleted."));
      }
    });
    return li;
  },
};

let memoryOpener = null;
function toggleMemory(force) {
  const open = force ?? drawer.hidden;
  drawer.hidden = !open;
  memoryToggle.setAttribute("aria-expanded", String(open));
  document.body.classList.toggle("memory-open", open);
  if (open) {
    memoryOpener = document.activeElement;
    memory.load();
    $("#memory-title").setAttribute("tabindex", "-1");
    $("#memory-title").focus();
  } else if (memoryOpener instanceof HTMLElement) {
    memoryOpener.focus();
  }
}
for (const button of document.querySelectorAll('[data-action="toggle-memory"]')) button.addEventListener("click", () => toggleMemory());
$('[data-action="refresh-memory"]').addEventListener("click", () => memory.load());
drawer.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && !event.target.closest(".memory-form")) {
    event.stopPropagation();
    toggleMemory(false);
  }
});

// The sidebar on small screens

const sidebar = $("#sidebar");
const scrim = $(".sidebar-scrim");
function toggleSidebar(force) {
  const toggle = $('.sidebar-toggle[data-action="toggle-sidebar"]');
  const open = force ?? !document.body.classList.contains("sidebar-open");
  document.body.classList.toggle("sidebar-open", open);
  toggle.setAttribute("aria-expanded", String(open));
  scrim.hidden = !open;
  if (open) sidebar.querySelector("input, a")?.focus();
}
for (const node of document.querySelectorAll('[data-action="toggle-sidebar"]')) node.addEventListener("click", () => toggleSidebar());
sidebar.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && document.body.classList.contains("sidebar-open")) toggleSidebar(false);
});

// Keyboard shortcuts of the chat page (the shared ones are in sessions.js)

document.addEventListener("keydown", (event) => {
  if (event.ctrlKey || event.metaKey || event.altKey || document.querySelector("dialog[open]")) return;
  if (event.key === "Escape" && event.shiftKey) {
    event.preventDefault();
    composer.focus();
    return;
  }
  if (event.key === "Escape" && !isTyping(event) && activeRun()) {
    event.preventDefault();
    stopRun();
    return;
  }
  if (isTyping(event)) return;
  if (event.key === "i") {
    event.preventDefault();
    composer.focus();
  } else if (event.key === "c") {
    const last = Array.from(state.runs.values()).filter((r) => !r.parentRun && answerText(r)).pop();
    if (last) {
      event.preventDefault();
      copyText(answerText(last)).then((ok) => announce(ok ? "Copied the last answer" : "Could not copy"));
    }
  } else if (event.key === "m") {
    event.preventDefault();
    toggleMemory();
  }
});

// The connection

const socket = {
  ws: null,
  attempt: 0,
  after: null, // set by a resync frame
  retryTimer: null,
  pingTimer: null,
  pongTimer: null,
  done: false, // a close that must not be retried (signed out, deleted)
  everConnected: false,
};

function setBanner(stateName, text, { retry = false } = {}) {
  banner.dataset.state = stateName;
  $('[data-role="text"]', banner).replaceChildren(...(Array.isArray(text) ? text : [text]));
  $('[data-action="reconnect-now"]', banner).hidden = !retry;
}

function connect() {
  clearTimeout(socket.retryTimer);
  if (socket.ws && socket.ws.readyState <= WebSocket.OPEN) return;
  const after = socket.after ?? state.seen;
  socket.after = null;
  const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(`${scheme}//${window.location.host}${config.urls.websocket}?after=${after}`);
  socket.ws = ws;
  ws.addEventListener("message", (message) => {
    let frame;
    try {
      frame = JSON.parse(message.data);
    } catch {
      return;
    }
    onFrame(frame);
  });
  ws.addEventListener("close", (event) => onClose(ws, event.code));
}

function onFrame(frame) {
  switch (frame.type) {
    case "event":
      applyEvent(frame.event);
      break;
    case "delta":
      applyDelta(frame);
      break;
    case "caught_up":
      onCaughtUp();
      break;
    case "resync":
      socket.after = Math.min(state.seen, frame.after);
      break;
    case "pong":
      clearTimeout(socket.pongTimer);
      // The socket outlived a network blip (browsers may keep it open): say so.
      if (banner.dataset.state !== "connected") {
        socket.attempt = 0;
        banner.classList.remove("is-quiet");
        setBanner("connected", "Connected again. You are up to date.");
      }
      break;
    case "error":
      console.warn("goaai stream:", frame.code, frame.detail);
      break;
    default:
      break;
  }
}

function onCaughtUp() {
  const first = !state.caughtUp;
  socket.attempt = 0;
  const reconnected = socket.everConnected;
  socket.everConnected = true;
  setBanner("connected", reconnected ? "Connected again. You are up to date." : "Connected");
  // The first connection is the normal case: nothing to point out.
  banner.classList.toggle("is-quiet", !reconnected);
  clearInterval(socket.pingTimer);
  socket.pingTimer = setInterval(ping, 25000);
  if (first) {
    state.caughtUp = true;
    $('[data-role="loading"]', transcript)?.remove();
    $('[data-role="intro"]', transcript).hidden = state.runs.size > 0;
    for (const run of state.runs.values()) renderRun(run);
    updateComposer();
    scrollToBottom();
    memory.load();
    if (!activeRun() && state.sessionStatus !== "ended" && !isTyping({ target: document.activeElement })) composer.focus({ preventScroll: true });
  }
}

function ping() {
  const ws = socket.ws;
  if (!ws || ws.readyState !== WebSocket.OPEN) return;
  ws.send(JSON.stringify({ type: "ping" }));
  clearTimeout(socket.pongTimer);
  // No answer: the connection is dead without having said so. Start again.
  socket.pongTimer = setTimeout(() => ws.close(), 10000);
}

function onClose(ws, code) {
  if (ws !== socket.ws) return;
  clearInterval(socket.pingTimer);
  clearTimeout(socket.pongTimer);
  socket.ws = null;
  if (code === 4401) {
    socket.done = true;
    setBanner("offline", ["You are signed out. ", el("a", { href: `${config.urls.login}?next=${encodeURIComponent(window.location.pathname)}` }, "Sign in again")]);
    return;
  }
  if (code === 4404 || code === 4403) {
    socket.done = true;
    setBanner("offline", code === 4404 ? "This chat no longer exists." : "This page may not follow this chat.");
    composer.disabled = true;
    return;
  }
  if (code === 4409) {
    // The server says we fell behind: reconnect at once from what we have.
    connect();
    return;
  }
  scheduleReconnect();
}

function scheduleReconnect() {
  if (socket.done) return;
  socket.attempt += 1;
  if (!navigator.onLine) {
    setBanner("offline", "You are offline. The chat reconnects when the network is back.", { retry: true });
    return;
  }
  const delay = Math.min(30000, 500 * 2 ** (socket.attempt - 1)) + Math.random() * 300;
  if (socket.attempt > 5) {
    setBanner("offline", `Connection lost. Trying again in ${Math.round(delay / 1000)} s (attempt ${socket.attempt})…`, { retry: true });
  } else {
    setBanner("reconnecting", `Reconnecting… (attempt ${socket.attempt})`, { retry: socket.attempt > 1 });
  }
  socket.retryTimer = setTimeout(connect, delay);
}

$('[data-action="reconnect-now"]', banner).addEventListener("click", () => {
  setBanner("reconnecting", `Reconnecting… (attempt ${socket.attempt + 1})`);
  // A socket still open is checked with a ping; a dead one closes and reconnects.
  if (socket.ws && socket.ws.readyState === WebSocket.OPEN) ping();
  else connect();
});
window.addEventListener("online", () => {
  if (socket.done) return;
  if (socket.ws) ping();
  else connect();
});
window.addEventListener("offline", () => {
  if (!socket.done) setBanner("offline", "You are offline. The chat reconnects when the network is back.", { retry: true });
});
document.addEventListener("visibilitychange", () => {
  if (document.visibilityState === "visible" && !socket.ws && !socket.done) connect();
});

updateComposer();
autosize();
connect();
