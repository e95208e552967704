// Redo and fork. A retry, a regenerated answer and an edited message are new runs
// that continue from the point before the run they redo: the transcript shows the
// branch the conversation is on now, and the exchanges it left behind fold away under
// the run that replaced them ("Edited · Show the earlier version"). A fork opens a new
// chat whose history is this one up to the chosen answer.
import { api, errorText } from "./api.js";
import { el } from "./dom.js";
import { TERMINAL, config, onStateChange, state } from "./state.js";

const REDONE = { retry_of: "Retried", regenerates: "Regenerated", edit_of: "Edited" };
// The order in which the top-level runs were created: the newest is the branch's head.
let created = 0;

/** run.created: where a top-level run stands on the session's branches. */
export function noteBranch(run, data) {
  if (run.parentRun || run.order) return;
  created += 1;
  run.order = created;
  run.previousRun = data.previous_run || null;
  run.redoes = null;
  for (const [field, label] of Object.entries(REDONE)) {
    if (data[field]) run.redoes = { id: data[field], label };
  }
  decorate(run);
  if (state.caughtUp) refreshBranches();
}

function topRuns() {
  return [...state.runs.values()].filter((run) => !run.parentRun && run.order);
}

/** The ids of the runs on the branch that ends with the newest run. */
function currentBranch() {
  const runs = topRuns();
  const on = new Set();
  if (!runs.length) return on;
  let run = runs.reduce((a, b) => (a.order > b.order ? a : b));
  while (run && !on.has(run.id)) {
    on.add(run.id);
    run = run.previousRun ? state.runs.get(run.previousRun) : null;
  }
  return on;
}

/** Whether `run` comes after `ancestor` (or is it) on its own branch. */
function descendsFrom(run, ancestorId) {
  const seen = new Set();
  for (let current = run; current && !seen.has(current.id); current = state.runs.get(current.previousRun)) {
    if (current.id === ancestorId) return true;
    seen.add(current.id);
  }
  return false;
}

/** Hides the exchanges the conversation left behind (unless their replacement shows
 * them) and offers each redo where it fits. */
export function refreshBranches() {
  const on = currentBranch();
  const runs = topRuns();
  const head = runs.reduce((a, b) => (!a || b.order > a.order ? b : a), null);
  for (const run of runs) {
    const off = !on.has(run.id);
    const shownBy = off ? runs.find((r) => r.redoes && r.showingEarlier && descendsFrom(run, r.redoes.id)) : null;
    run.el.classList.toggle("is-off-branch", off);
    run.el.hidden = off && !shownBy;
    updateButtons(run, { onBranch: !off, isHead: run === head });
  }
}

function updateButtons(run, { onBranch, isHead }) {
  const ended = TERMINAL.has(run.status);
  const speaking = Boolean(config.may.post) && state.sessionStatus !== "ended";
  const b = run.branchButtons;
  if (!b) return;
  b.regenerate.hidden = !(speaking && onBranch && isHead && ["completed", "canceled"].includes(run.status));
  b.edit.hidden = !(speaking && onBranch && ended);
  // A fork copies the conversation into a chat of one's own: the owner's to make.
  b.fork.hidden = !(config.user.id === config.session.owner.id && onBranch && ended);
  if (b.earlier) b.earlier.hidden = !run.redoes || !state.runs.has(run.redoes.id);
}

/** The buttons and the note a top-level run gets: Regenerate, Fork, Edit (next to
 * the message), and for a run that redoes another, what it redid. */
function decorate(run) {
  const regenerate = button("Regenerate", "regenerate-button", "Answer this message again");
  const fork = button("Fork", "fork-button", "Continue from here in a new chat");
  const edit = button("Edit", "edit-button", "Change this message and continue from it");
  regenerate.addEventListener("click", () => redo(run, "regenerate", regenerate));
  fork.addEventListener("click", () => forkFrom(run, fork));
  edit.addEventListener("click", () => startEditing(run, edit));
  run.actions.append(regenerate, fork);
  run.inputText.after(edit);
  run.branchError = el("p", { class: "branch-error", role: "alert", hidden: true, "data-testid": "branch-error" });
  run.actions.after(run.branchError);
  run.branchButtons = { regenerate, fork, edit, earlier: null };
  if (run.redoes) {
    const earlier = button("Show the earlier version", "earlier-version", "Show what this replaced");
    earlier.setAttribute("aria-expanded", "false");
    earlier.addEventListener("click", () => {
      run.showingEarlier = !run.showingEarlier;
      earlier.setAttribute("aria-expanded", String(run.showingEarlier));
      earlier.textContent = run.showingEarlier ? "Hide the earlier version" : "Show the earlier version";
      refreshBranches();
    });
    run.branchButtons.earlier = earlier;
    run.inputText.before(el("span", { class: "redo-note muted", "data-testid": "redo-note" }, `${run.redoes.label} · `, earlier));
  }
}

function button(text, testid, title) {
  return el("button", { type: "button", class: "button button-small link-button", "data-testid": testid, title, hidden: true }, text);
}

function showError(run, result) {
  run.branchError.textContent = errorText(result, "That did not work.");
  run.branchError.hidden = false;
}

/** POST /runs/{id}/<how>/ once: the button stays disabled while it is sent, and
 * after it was taken (the new run arrives on the event stream, and the branch it
 * starts decides which buttons show), so a second click redoes nothing twice. */
async function redo(run, how, control, body) {
  if (control.disabled) return false;
  control.disabled = true;
  run.branchError.hidden = true;
  const result = await api(`runs/${run.id}/${how}/`, { method: "POST", body: body || {} });
  if (!result.ok) {
    control.disabled = false;
    showError(run, result);
  }
  return result.ok;
}

/** Retry of a failed or stopped run (its error box's button, composer.js). */
export function retryRun(run, control) {
  return redo(run, "retry", control);
}

async function forkFrom(run, control) {
  if (control.disabled) return;
  control.disabled = true;
  const result = await api(`runs/${run.id}/fork/`, { method: "POST", body: {} });
  if (result.ok) {
    window.location.assign(`/sessions/${result.data.session.id}/`);
    return;
  }
  control.disabled = false;
  showError(run, result);
}

function startEditing(run, control) {
  if (run.editing) return;
  run.editing = true;
  const box = el("textarea", { class: "edit-box", rows: "3", "aria-label": "Your message, edited", "data-testid": "edit-box" });
  box.value = run.input;
  const save = el("button", { type: "button", class: "button button-small", "data-testid": "edit-save" }, "Send edited");
  const cancel = el("button", { type: "button", class: "button button-small link-button" }, "Cancel");
  const form = el("div", { class: "edit-form" }, box, save, cancel);
  run.inputText.hidden = true;
  control.hidden = true;
  run.inputText.after(form);
  const close = () => {
    run.editing = false;
    form.remove();
    run.inputText.hidden = false;
    refreshBranches();
  };
  cancel.addEventListener("click", close);
  box.addEventListener("keydown", (event) => {
    if (event.key === "Escape") close();
    if (event.key === "Enter" && !event.shiftKey) {
      event.preventDefault();
      save.click();
    }
  });
  save.addEventListener("click", async () => {
    const text = box.value.trim();
    if (!text) return;
    if (await redo(run, "edit", save, { input: text })) close();
  });
  box.focus();
}

onStateChange(() => {
  if (state.caughtUp) refreshBranches();
});
