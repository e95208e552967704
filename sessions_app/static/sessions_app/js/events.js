// The session's events applied to the page, each once: an event whose seq was seen
// already is dropped, so a reconnect never duplicates or wipes anything. Token
// deltas fill a turn's buffer; message.completed replaces it, never appends.
import { noteBranch } from "./branches.js";
import { OPEN_CARD, ensureCard, renderArgs, renderOutcome, setCardStatus, showDecision } from "./cards.js";
import { announce, el } from "./dom.js";
import { refreshMemorySoon } from "./drawer.js";
import { stopText } from "./endings.js";
import { formatDuration } from "./format.js";
import { setSessionStatus, setTitle } from "./header.js";
import { loadRunReasoning } from "./reasoning.js";
import { ensureRun, markCutOff, renderRun, setMessageText, showRunError, step, turnMessage, turnSlot } from "./render.js";
import { showPending } from "./respond.js";
import { rendered } from "./scroll.js";
import { config, state, who } from "./state.js";
import { addTurnUsage } from "./usage.js";

// Why a model call is retried, in the words of its error kind.
const RETRY_REASONS = {
  rate_limited: "the provider is rate limiting us",
  unavailable: "the provider is unavailable for a moment",
  timeout: "the model took too long to answer",
  internal: "the provider had an error",
};

// Why a model stopped, when it is worth saying (an ordinary stop is not).
const FINISH_NOTES = {
  length: "cut off by the length limit",
  content_filter: "stopped by the provider's content filter",
};

function formatSeconds(seconds) {
  const value = Number(seconds) || 0;
  return value < 60 ? `${value < 10 ? value.toFixed(1).replace(/\.0$/, "") : Math.round(value)} s` : formatDuration(value * 1000);
}

// Turns whose worker died while the model answered: their text gives way to the
// answer asked again in the turn after them (never shown twice).
const lostTurns = new Set();

/** Whether an event happened after the page was drawn. Which runs had lost their
 * worker then, the page was told (config.open_runs); older events do not change it. */
function isNews(event) {
  return event.seq > (config.session.last_event_seq || 0);
}

/** Announces to screen readers, but not while the history is being replayed. */
function say(text) {
  if (state.caughtUp) announce(text);
}

/** A run that ended leaves no call waiting and no message streaming. */
function settleOpenParts(run, why) {
  for (const card of state.calls.values()) {
    if (card.runId !== run.id) continue;
    if (OPEN_CARD.has(card.status)) {
      card.needsEye = false;
      setCardStatus(card, "canceled");
      if (card.pending) card.pending.settle(why);
    }
  }
  for (const message of run.messages) message.el.classList.remove("is-streaming");
}

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
    noteBranch(run, event.data);
    step(run, run.parentRun ? `Asked by its parent run` : `Asked ${run.agent}`, event.created_at);
  },
  "run.queued"(event, run) {
    // It waits for the runs before it (run.started ends the wait).
    run.queuedBehind = event.data.behind || null;
    run.queuedBy = event.data.multitask || "enqueue";
    const ahead = Number(event.data.ahead) || 1;
    const what = run.queuedBy === "interrupt" ? "the answer it stopped to end" : ahead > 1 ? `${ahead} earlier messages to be answered` : "the current answer to finish";
    step(run, `Queued: waits for ${what}`, event.created_at);
    say("Your message is queued: it starts when the current answer finishes");
  },
  "run.started"(event, run) {
    run.queuedBehind = null;
    run.status = "running";
    run.startedAt = run.startedAt || event.created_at;
    run.activity = "Thinking…";
    step(run, "Started", event.created_at);
  },
  "turn.started"(event, run) {
    turnSlot(run, event.data.turn);
    // A run taken up again after an interruption is at work again.
    if (isNews(event)) state.interrupted.delete(run.id);
    run.activity = "Thinking…";
    step(run, `Turn ${event.data.index + 1}: asked the model (${event.data.model})${event.data.restarted ? " again after a restart" : ""}`, event.created_at);
  },
  "message.completed"(event, run) {
    if (lostTurns.has(event.data.turn)) return;
    const message = turnMessage(run, event.data.turn);
    // The complete text replaces whatever the deltas wrote: never appended.
    setMessageText(message, event.data.text || "");
    message.completed = true;
    message.el.classList.remove("is-streaming");
    if (state.cutOff.has(event.data.turn)) markCutOff(message);
  },
  "turn.completed"(event, run) {
    if (event.data.interruption === "crashed") {
      // Lost with its worker: what it had said gives way to the answer asked again.
      lostTurns.add(event.data.turn);
      const lost = state.turns.get(event.data.turn);
      if (lost) {
        lost.completed = true;
        lost.el.remove();
        run.messages = run.messages.filter((m) => m !== lost);
      }
      step(run, `Turn ${event.data.index + 1}: lost with its worker; asked again`, event.created_at, "warn");
      return;
    }
    const cutOff = Boolean(event.data.truncated) || event.data.finish_reason === "length";
    if (cutOff) state.cutOff.add(event.data.turn);
    const message = state.turns.get(event.data.turn);
    if (message) {
      message.el.classList.remove("is-streaming");
      if (!message.text) message.el.remove();
      else if (cutOff) markCutOff(message);
    }
    const calls = event.data.tool_calls ? `, asked for ${event.data.tool_calls} tool call${event.data.tool_calls === 1 ? "" : "s"}` : "";
    const note = FINISH_NOTES[event.data.finish_reason];
    step(run, `Turn ${event.data.index + 1}: the model answered in ${formatDuration(event.data.latency_ms)}${calls}${note ? ` (${note})` : ""}`, event.created_at, note ? "warn" : "");
    if (state.caughtUp) loadRunReasoning(run.id);
  },
  "model.retry"(event, run) {
    // What the failed attempt streamed is not the answer: the next attempt writes it.
    const message = state.turns.get(event.data.turn);
    if (message && !message.completed) setMessageText(message, "");
    const why = RETRY_REASONS[event.data.error_kind] || `the model call failed (${event.data.error_kind || "error"})`;
    const wait = formatSeconds(event.data.delay_seconds);
    run.activity = `Retrying in ${wait}: ${why}…`;
    step(run, `Retrying in ${wait}: ${why}`, event.created_at, "warn");
    say(`Retrying in ${wait}: ${why}`);
  },
  usage(event, run) {
    addTurnUsage(run.usage, event.data);
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
    card.answer = event.data.answer ?? null;
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
        showPending(card, "question", event.data);
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
    } else if (event.data.kind === "client_tool") {
      for (const id of event.data.tool_calls || [event.data.tool_call]) {
        const waited = state.calls.get(id);
        if (waited) setCardStatus(waited, "awaiting_caller");
      }
      step(run, `Waits for the caller's tool result (${card ? card.name : "a tool of its own"})`, event.created_at);
      say("Waiting for the caller's tool result");
    } else {
      step(run, "Waits for the agent it asked", event.created_at);
    }
  },
  "run.interrupted"(event, run) {
    // Its worker is known lost: the run is taken up again at once.
    if (isNews(event)) state.interrupted.add(run.id);
    step(run, `Interrupted — resuming (${event.data.reason || "its worker stopped"})`, event.created_at, "warn");
    say("Interrupted — resuming");
  },
  "run.resumed"(event, run) {
    run.status = "running";
    run.awaiting = null;
    run.activity = "Continuing…";
    if (event.data.reason === "worker_lost") {
      // Taken over from a worker that was lost (run.interrupted says why): it is
      // "resuming" until its next step begins.
      if (isNews(event)) state.interrupted.add(run.id);
      step(run, "Picked up again by another worker", event.created_at);
    } else {
      if (isNews(event)) state.interrupted.delete(run.id);
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
    refreshMemorySoon();
  },
  "memory.deleted"(event, run) {
    if (run) step(run, `Forgot “${event.data.key}” (${event.data.scope})`, event.created_at);
    refreshMemorySoon();
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
    run.stoppedBy = event.data.stopped_by || null;
    settleOpenParts(run, "The run failed before this was answered.");
    showRunError(run);
    step(run, `Failed: ${run.error.message || run.error.kind || ""}`, event.created_at, "failed");
    say("The run failed");
  },
  "run.timed_out"(event, run) {
    run.status = "timed_out";
    run.endedAt = event.created_at;
    run.error = event.data.error || { kind: "timeout", message: event.data.message || "" };
    run.stoppedBy = event.data.stopped_by || null;
    settleOpenParts(run, "The run ran out of time before this was answered.");
    showRunError(run);
    step(run, "Timed out", event.created_at, "failed");
    say("The run timed out");
  },
  "run.canceled"(event, run) {
    run.status = "canceled";
    run.endedAt = event.created_at;
    state.stopping.delete(run.id);
    state.interrupted.delete(run.id);
    run.stoppedBy = event.data.stopped_by || null;
    const stopper = stopText(run.stoppedBy);
    settleOpenParts(run, `Canceled: ${stopper ? stopper.charAt(0).toLowerCase() + stopper.slice(1) : "the run was stopped"} before this was answered.`);
    for (const message of run.messages) {
      if (message.text && !message.el.querySelector(".stopped-tag")) message.el.append(el("span", { class: "stopped-tag", "data-testid": "stopped-tag" }, "stopped"));
    }
    step(run, `${stopper || "Stopped"}${event.data.reason ? ` (${event.data.reason})` : ""}`, event.created_at, "failed");
    say(stopper || "Stopped");
  },
};

export function applyEvent(event) {
  if (typeof event.seq !== "number" || event.seq <= state.seen) return; // seen already
  state.seen = event.seq;
  const handler = handlers[event.type];
  if (!handler) return;
  const info =
    event.type === "run.created"
      ? { input: event.data.input, parentRun: event.data.parent_run, labels: event.data.labels, agent: event.data.agent }
      : {};
  const run = event.run ? ensureRun(event.run, info) : null;
  handler(event, run);
  if (run) renderRun(run);
  rendered();
}

/** How many characters a message's text holds, counted as delta offsets count
 * them (code points, not UTF-16 units); kept with the text it was counted for. */
function streamedLength(message) {
  if (message.countedText !== message.text) {
    message.countedText = message.text;
    message.counted = [...message.text].length;
  }
  return message.counted;
}

/** The part of a delta's text the message does not hold yet: a delta says where
 * its text begins in the turn's (`offset`), so text already shown (the catch-up
 * after a reconnect sends a turn's text from its start) is never added twice. */
function newText(message, frame) {
  const text = String(frame.text || "");
  if (typeof frame.offset !== "number") return text;
  const have = streamedLength(message);
  if (frame.offset >= have) return text;
  const chars = [...text];
  return chars.length > have - frame.offset ? chars.slice(have - frame.offset).join("") : "";
}

export function applyDelta(frame) {
  if (!frame.run || !frame.turn) return;
  const known = state.turns.get(frame.turn);
  if (known && known.completed) return; // message.completed already holds the full text
  const run = ensureRun(frame.run);
  const message = turnMessage(run, frame.turn);
  const piece = newText(message, frame);
  if (!piece) return;
  const counted = streamedLength(message) + [...piece].length;
  setMessageText(message, message.text + piece);
  message.countedText = message.text;
  message.counted = counted;
  if (run.status === "running") run.activity = "Writing…";
  renderRun(run);
  rendered();
}
