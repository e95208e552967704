// The message box: Send (Answer when the agent asked a question), Stop while a run is
// active (Esc too), "Ask me before each tool", Retry of a failed run, and the
// suggestions of an empty chat. Stop cancels the run on the server.
import { api, errorText } from "./api.js";
import { $, el } from "./dom.js";
import { nameAfter, setSessionStatus } from "./header.js";
import { ensureRun, renderRun } from "./render.js";
import { scrollToBottom } from "./scroll.js";
import { activeRun, config, onStateChange, pendingQuestion, state, waitingFor } from "./state.js";

const SESSION = config.session.id;
const composerForm = $("#composer-form");
const composer = $("#composer");
const sendButton = $('[data-role="send"]', composerForm);
const stopButton = $('[data-role="stop"]', composerForm);
const reviewToggle = $('[data-role="review"]', composerForm);

/** Shows what the composer can do now: send, answer, stop, or nothing (ended). */
export function updateComposer() {
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
    const run = ensureRun(result.data.id, { input: result.data.input, labels: result.data.labels });
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

/** The Retry button of a failed run (render.js) sends its message again. */
async function retry(button) {
  const run = state.runs.get(button.dataset.runId);
  if (!run) return;
  button.disabled = true;
  button.textContent = "Retrying…";
  const ok = await startRun(run.input, run.labels);
  if (!ok) {
    button.disabled = false;
    button.textContent = "Retry";
  } else {
    button.remove();
  }
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
        question.pending?.settle("Answered from the message box.");
      } else if (result.status === 409) {
        question.pending?.settle("This question expired.");
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

/** The chat is gone or not this user's to follow: nothing can be sent any more. */
export function disableComposer() {
  composer.disabled = true;
}

export function startComposer() {
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
  $("#transcript").addEventListener("click", (event) => {
    const button = event.target instanceof Element ? event.target.closest('[data-action="retry"]') : null;
    if (button) retry(button);
  });
  onStateChange(updateComposer);
  updateComposer();
  autosize();
}
