// The transcript's exchanges: the user's message, the answer (one buffer per turn),
// the line saying what the run is doing with its list of steps, and its error. A
// child run (an agent asked by another) is drawn inside its parent.
import { copyButton } from "./clipboard.js";
import { $, el, uid } from "./dom.js";
import { stopText } from "./endings.js";
import { feedbackControls } from "./feedback.js";
import { formatDuration, formatTime } from "./format.js";
import { TERMINAL, answerText, answerWithTools, config, isQueued, state, stateChanged, waitingFor } from "./state.js";
import { renderMarkdown } from "./markdown.js";
import { emptyUsage, usageLine } from "./usage.js";

const transcript = $("#transcript");

/** The run with this id, drawn the first time it is named. */
export function ensureRun(runId, info = {}) {
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
    status: "pending",
    activity: "",
    awaiting: null,
    queuedBehind: null, // the run it waits for (run.queued), until it starts
    queuedBy: "", // the policy that queued it: enqueue, or interrupt
    usage: emptyUsage(),
    startedAt: null,
    endedAt: null,
    output: "",
    error: null,
    stoppedBy: null, // who or what stopped it (its end event's stopped_by)
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
  // A message waiting for its turn can be taken back before it starts (composer.js).
  run.cancelQueued = el(
    "button",
    { type: "button", class: "button button-small", dataset: { action: "cancel-queued", runId }, "data-testid": "cancel-queued", hidden: true },
    "Cancel",
  );
  const statusRow = el("div", { class: "run-status-row" }, run.statusButton, run.cancelQueued, run.usageText, run.actions);
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
      feedbackControls(run),
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

/** A line in the run's step list. */
export function step(run, text, at, kind = "") {
  run.steps.append(el("li", { class: kind ? `step step-${kind}` : "step" }, el("time", { datetime: at || "" }, formatTime(at)), " ", text));
}

function statusLine(run) {
  if (run.status === "running" && state.interrupted.has(run.id)) {
    // Its worker was lost (a server restart): another takes it up.
    return "Interrupted — resuming…";
  }
  switch (run.status) {
    case "pending":
      if (isQueued(run)) {
        return run.queuedBy === "interrupt" ? "Queued — starts when the stopped answer has ended" : "Queued — starts when the current answer finishes";
      }
      return "Queued…";
    case "running":
      if (state.stopping.has(run.id)) return "Stopping…";
      return run.activity || "Thinking…";
    case "awaiting_input": {
      const waiting = waitingFor(run);
      const kind = waiting ? waiting.kind : run.awaiting && run.awaiting.kind;
      const by = waiting && waiting.run !== run ? ` (the ${waiting.run.agent} agent asks)` : "";
      if (kind === "question") return `Waiting for your answer${by}`;
      if (kind === "approval") return `Waiting for your approval${by}`;
      if (kind === "client_tool") return "Waiting for the caller's tool result";
      return "Waiting for the agent it asked";
    }
    case "completed": {
      const duration = run.startedAt && run.endedAt ? ` in ${formatDuration(new Date(run.endedAt) - new Date(run.startedAt))}` : "";
      return `Done${duration}`;
    }
    case "failed":
      return stopText(run.stoppedBy) || "Failed";
    case "canceled":
      return stopText(run.stoppedBy) || "Stopped";
    case "timed_out":
      return stopText(run.stoppedBy) || "Timed out";
    default:
      return run.status;
  }
}

/** Redraws the run's status line, usage and copy buttons, then its parent's. */
export function renderRun(run) {
  run.el.dataset.status = run.status;
  run.el.dataset.queued = String(isQueued(run));
  run.el.classList.toggle("is-interrupted", state.interrupted.has(run.id) && run.status === "running");
  run.el.classList.toggle("is-queued", isQueued(run));
  run.cancelQueued.hidden = !isQueued(run) || !config.may.cancel;
  run.statusText.textContent = statusLine(run);
  const usage = usageLine(run.usage);
  run.usageText.textContent = usage.text;
  if (usage.title) run.usageText.title = usage.title;
  else run.usageText.removeAttribute("title");
  run.actions.hidden = !TERMINAL.has(run.status) || !answerText(run);
  if (run.parentRun && state.runs.has(run.parentRun)) renderRun(state.runs.get(run.parentRun));
  else if (state.caughtUp) stateChanged(); // once, at caught_up, while replaying history
}

/** The error of a failed or timed-out run, with Retry (composer.js sends it). */
export function showRunError(run) {
  const error = run.error || {};
  const title = run.status === "timed_out" ? "The run ran out of time." : "The run failed.";
  const box = run.errorBox;
  // The message is a plain sentence for the error's kind (goaai.runtime.public_errors);
  // the kind stays in an attribute, for whoever helps with it.
  if (error.kind) box.dataset.kind = error.kind;
  box.replaceChildren(
    el("p", { class: "run-error-title" }, el("strong", {}, title)),
    el("p", { class: "run-error-message", "data-testid": "run-error-message" }, error.message || "No reason was given."),
  );
  if (!run.parentRun && run.input) {
    box.append(
      el(
        "button",
        { type: "button", class: "button button-small", dataset: { action: "retry", runId: run.id }, "data-testid": "retry-button" },
        error.retryable ? "Retry (it may work now)" : "Retry",
      ),
    );
  }
  box.hidden = false;
}

/** The answer of one turn: deltas fill it, message.completed replaces it. */
export function turnMessage(run, turnId) {
  let message = state.turns.get(turnId);
  if (message) return message;
  const text = el("div", { class: "msg-text markdown" });
  message = { text: "", completed: false, textEl: text, frame: 0 };
  message.el = el("div", { class: "msg msg-assistant is-streaming", dataset: { turnId }, "data-testid": "assistant-message" }, text);
  state.turns.set(turnId, message);
  run.messages.push(message);
  appendSegment(run, message.el);
  return message;
}

/** Sets the answer's text; it is drawn as markdown (markdown.js), the whole text so
 * far each time, at most once an animation frame while it streams. */
export function setMessageText(message, text) {
  message.text = text;
  if (message.frame) return;
  message.frame = requestAnimationFrame(() => {
    message.frame = 0;
    renderMarkdown(message.textEl, message.text);
  });
}

/** Where a turn's reasoning goes: a place in the run's body made when the turn
 * starts, before anything the turn says (it does not end a group of tool cards). */
export function turnSlot(run, turnId) {
  let slot = state.slots.get(turnId);
  if (!slot) {
    slot = el("div", { class: "turn-slot", hidden: true, dataset: { turnId } });
    run.body.append(slot);
    state.slots.set(turnId, slot);
  }
  return slot;
}

/** The model's reasoning for a turn, folded (a <details> the reader opens). */
export function showReasoning(turnId, text) {
  const slot = state.slots.get(turnId);
  if (!slot || !text || slot.dataset.filled) return;
  slot.dataset.filled = "1";
  slot.replaceChildren(
    el(
      "details",
      { class: "reasoning", "data-testid": "reasoning" },
      el("summary", {}, "Reasoning"),
      el("div", { class: "reasoning-text", "data-testid": "reasoning-text" }, text),
    ),
  );
  slot.hidden = false;
}

/** Marks an answer the output length limit cut off (once). */
export function markCutOff(message) {
  if (message.el.querySelector(".cutoff-tag")) return;
  message.el.append(el("span", { class: "cutoff-tag", "data-testid": "cutoff-tag", title: "The model reached its output limit before it finished" }, "cut off by the length limit"));
}
