// The message box: Send (Answer when the agent asked a question), Stop while a run is
// active (Esc too), "Ask me before each tool", Retry of a failed run, and the
// suggestions of an empty chat. Stop cancels the run on the server. A message sent
// while a run is active does what the agent's policy says (config.session.multitask):
// it is queued behind that run, stops it first, or is refused.
import { api, errorText } from "./api.js";
import { retryRun } from "./branches.js";
import { $, el } from "./dom.js";
import { nameAfter, setSessionStatus } from "./header.js";
import { ensureRun, renderRun } from "./render.js";
import { scrollToBottom } from "./scroll.js";
import { closeStream } from "./socket.js";
import { activeRun, config, onStateChange, pendingQuestion, state, waitingFor } from "./state.js";

const SESSION = config.session.id;
const composerForm = $("#composer-form");
const composer = $("#composer");
const sendButton = $('[data-role="send"]', composerForm);
const stopButton = $('[data-role="stop"]', composerForm);
const reviewToggle = $('[data-role="review"]', composerForm);

// What the box says once the chat is gone (state.gone).
const GONE = {
  deleted: "This chat was deleted.",
  forbidden: "You may no longer follow this chat.",
};

// What the note under the box says of a message sent while the agent is answering.
const WHILE_BUSY = {
  enqueue: "The agent is answering. A message you send now is queued: it starts when the current answer finishes.",
  interrupt: "The agent is answering. Sending a message now stops the current answer, then starts yours.",
  reject: "The agent takes one message at a time: wait for this answer to finish, or Stop it, before you send another.",
};

/** Shows what the composer can do now: send, answer, stop, or nothing (ended). */
export function updateComposer() {
  const note = $('[data-role="note"]', composerForm);
  // A chat deleted (or no longer this page's to follow) takes no message, as one ended.
  const gone = state.gone;
  const ended = state.sessionStatus === "ended" || Boolean(gone);
  const run = activeRun();
  const waiting = run ? waitingFor(run) : null;
  const busy = run && !waiting;
  composer.disabled = ended;
  reviewToggle.disabled = ended;
  // Send stays next to Stop while a run works: Enter queues (or sends) the next message.
  sendButton.hidden = false;
  sendButton.disabled = ended || state.sending;
  stopButton.hidden = ended || !run;
  stopButton.disabled = run ? state.stopping.has(run.id) : true;
  stopButton.textContent = run && state.stopping.has(run.id) ? "Stopping…" : "Stop";
  composerForm.dataset.state = ended ? "ended" : busy ? "busy" : run ? "waiting" : "idle";
  const question = pendingQuestion(run);
  sendButton.textContent = question ? "Answer" : "Send";
  note.replaceChildren();
  if (gone) {
    note.append(GONE[gone] || GONE.deleted, " ", el("a", { href: config.urls.new }, "Start a new chat"));
  } else if (ended) {
    note.append("This chat has ended; it takes no new messages. ", el("a", { href: config.urls.new }, "Start a new chat"));
  } else if (question) {
    note.append(el("strong", {}, "The agent asks: "), waiting.run.awaiting.question || "a question", " — your next message answers it.");
  } else if (waiting && waiting.kind === "approval") {
    note.append("A tool call waits for your approval above. Sending a new message cancels it.");
  } else if (busy) {
    note.append(WHILE_BUSY[config.session.multitask] || WHILE_BUSY.enqueue);
  }
  note.hidden = !note.childNodes.length;
  composer.placeholder = gone ? GONE[gone] || GONE.deleted : ended ? "This chat has ended" : question ? "Type your answer…" : `Message ${config.session.agent}…`;
}

// What the error under the box is about: "busy" (a message refused while the agent
// answered) goes when the answer ends, "network" (the server could not be reached)
// when the browser is online again; every error goes on an edit, a reconnect or
// the next successful send.
let errorCause = "";

function showComposerError(message, cause = "") {
  const box = $('[data-role="error"]', composerForm);
  box.textContent = message;
  box.hidden = !message;
  errorCause = message ? cause : "";
}

/** The cause of the error under the box has gone (an edit, a reconnect). */
export function clearComposerError() {
  showComposerError("");
}

function clearErrorOnceIdle() {
  if (errorCause === "busy" && !activeRun()) clearComposerError();
}

function newKey() {
  if (window.crypto && typeof window.crypto.randomUUID === "function") return window.crypto.randomUUID();
  return `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
}

/** Starts a run; a send that failed on the network is retried with the same
 * Idempotency-Key, so it cannot start the run twice. `multitask`: what it does to
 * the run still open (the agent's policy when not given). */
async function startRun(text, labels, multitask = "") {
  const body = { input: text };
  if (multitask) body.multitask = multitask;
  if (labels && Object.keys(labels).length) body.labels = labels;
  const signature = JSON.stringify(body);
  if (!state.pendingSend || state.pendingSend.signature !== signature) state.pendingSend = { signature, key: newKey() };
  const result = await api(`sessions/${SESSION}/runs/`, { method: "POST", body, headers: { "Idempotency-Key": state.pendingSend.key } });
  if (result.ok) {
    state.pendingSend = null;
    showComposerError("");
    const run = ensureRun(result.data.id, { input: result.data.input, labels: result.data.labels });
    if (run.status === "pending" && result.data.status !== "pending") run.status = result.data.status;
    if (run.status === "pending" && result.data.queued_behind && !run.queuedBehind) {
      run.queuedBehind = result.data.queued_behind;
      run.queuedBy = result.data.multitask || "enqueue";
    }
    renderRun(run);
    scrollToBottom();
    return true;
  }
  if (result.status === 404) {
    // Deleted meanwhile (in another tab, by an operator): the chat says so and ends.
    state.pendingSend = null;
    chatGone("deleted");
    return false;
  }
  const codes = result.status === 409 && result.data && Array.isArray(result.data.errors) ? result.data.errors.map((e) => e.code) : [];
  if (codes.includes("session_ended")) setSessionStatus("ended");
  if (result.status !== 0) state.pendingSend = null;
  if (codes.includes("run_active")) {
    showComposerError("Not sent: the agent is still answering and takes one message at a time. Wait for the answer to finish, or press Stop, then send your message again.", "busy");
  } else {
    showComposerError(errorText(result, "The message could not be sent."), result.status === 0 ? "network" : "");
  }
  return false;
}

/** The Retry button of a failed run (render.js) asks its message again, as a run
 * linked to it that takes its place in the conversation (branches.js). */
async function retry(button) {
  const run = state.runs.get(button.dataset.runId);
  if (!run) return;
  const label = button.textContent;
  button.textContent = "Retrying…";
  if (await retryRun(run, button)) button.remove();
  else button.textContent = label;
}

async function submitComposer() {
  const text = composer.value.trim();
  if (!text || state.sending || state.sessionStatus === "ended") return;
  const run = activeRun();
  state.sending = true;
  updateComposer();
  try {
    const question = pendingQuestion(run);
    if (question) {
      const result = await api(`runs/${question.runId}/respond/`, { method: "POST", body: { tool_call: question.id, answer: text } });
      if (result.ok) {
        composer.value = "";
        showComposerError("");
        question.pending?.settle("Answered from the message box.");
      } else if (result.status === 409) {
        question.pending?.settle("This question expired.");
        showComposerError("That question is no longer waiting for an answer. Send your message again to start a new request.");
      } else {
        showComposerError(errorText(result, "The answer could not be sent."), result.status === 0 ? "network" : "");
      }
      return;
    }
    // A new message instead of a decision replaces the waiting request: the server
    // stops it ("Replaced by your next message") and starts this one.
    const replacing = run && run.status === "awaiting_input" ? "interrupt" : "";
    const labels = reviewToggle.checked ? { review: "required" } : {};
    if (await startRun(text, labels, replacing)) {
      composer.value = "";
      if (!config.session.title) nameAfter(text);
    }
  } finally {
    state.sending = false;
    autosize();
    updateComposer();
  }
}

/** The Cancel button of a queued message (render.js): it ends canceled, never started. */
async function cancelQueued(button) {
  button.disabled = true;
  const result = await api(`runs/${button.dataset.runId}/cancel/`, { method: "POST", body: { reason: "canceled before it started" } });
  if (!result.ok && result.status !== 409) {
    button.disabled = false;
    showComposerError(errorText(result, "The queued message could not be canceled."));
  }
}

/** Cancels the active run on the server; its partial answer stays on screen. */
export async function stopRun() {
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

export function focusComposer(options) {
  composer.focus(options);
}

/** The chat is gone ("deleted") or no longer this user's to follow ("forbidden"):
 * the page says so, its stream ends and nothing can be sent any more. */
export function chatGone(why) {
  if (state.gone) return;
  state.gone = why;
  closeStream(GONE[why] || GONE.deleted);
  showComposerError("");
  updateComposer();
}

export function startComposer() {
  composerForm.addEventListener("submit", (event) => {
    event.preventDefault();
    submitComposer();
  });
  composer.addEventListener("input", () => {
    autosize();
    clearComposerError();
  });
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
  $("#transcript").addEventListener("click", (event) => {
    const target = event.target instanceof Element ? event.target : null;
    const button = target ? target.closest('[data-action="retry"]') : null;
    if (button) retry(button);
    const queued = target ? target.closest('[data-action="cancel-queued"]') : null;
    if (queued) cancelQueued(queued);
  });
  onStateChange(updateComposer);
  onStateChange(clearErrorOnceIdle);
  window.addEventListener("online", () => {
    if (errorCause === "network") clearComposerError();
  });
  updateComposer();
  autosize();
}
