// Feedback on an answer: thumbs up or down, and an optional comment, stored through
// POST /api/v1/runs/{id}/feedback/. One per answer: the other thumb replaces it, the
// pressed thumb again takes it back (DELETE). Only the chat's owner gives feedback.
import { api, errorText } from "./api.js";
import { announce, el, uid } from "./dom.js";
import { config } from "./state.js";

// The viewer's feedback on this chat's answers when the page was made, by run id.
const given = new Map(Object.entries(config.feedback || {}));

const THUMBS = {
  up: { label: "Good answer", said: "Marked as a good answer", path: "M14 9V5a3 3 0 0 0-3-3l-4 9v11h11.28a2 2 0 0 0 2-1.7l1.38-9a2 2 0 0 0-2-2.3zM7 22H4a2 2 0 0 1-2-2v-7a2 2 0 0 1 2-2h3" },
  down: { label: "Bad answer", said: "Marked as a bad answer", path: "M10 15v4a3 3 0 0 0 3 3l4-9V2H5.72a2 2 0 0 0-2 1.7l-1.38 9a2 2 0 0 0 2 2.3zm7-13h2.67A2.31 2.31 0 0 1 22 4v7a2.31 2.31 0 0 1-2.33 2H17" },
};
const SVG = "http://www.w3.org/2000/svg";

/** A thumb drawn as a line icon (no font has to have the emoji). */
function icon(path) {
  const svg = document.createElementNS(SVG, "svg");
  for (const [name, value] of Object.entries({ width: "16", height: "16", viewBox: "0 0 24 24", fill: "none", stroke: "currentColor", "stroke-width": "2", "stroke-linecap": "round", "stroke-linejoin": "round", "aria-hidden": "true" })) {
    svg.setAttribute(name, value);
  }
  const line = document.createElementNS(SVG, "path");
  line.setAttribute("d", path);
  svg.append(line);
  return svg;
}

function commentForm(view) {
  const id = uid("feedback");
  const input = el("textarea", { id, rows: "2", maxlength: "2000", "data-testid": "feedback-comment" });
  const save = el("button", { type: "submit", class: "button button-primary button-small", "data-testid": "feedback-save" }, "Send comment");
  const close = el("button", { type: "button", class: "button button-small button-ghost" }, "Close");
  const label = el("label", { for: id });
  const form = el("form", { class: "feedback-form", hidden: true, "data-testid": "feedback-form" }, label, input, el("div", { class: "form-actions" }, close, save));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!view.value || !(await send(view, view.value, input.value.trim()))) return;
    form.hidden = true;
    view.status.textContent = view.text ? "Thanks for the comment." : "";
    view.buttons[view.value].focus();
  });
  close.addEventListener("click", () => {
    form.hidden = true;
    view.buttons[view.value || "up"].focus();
  });
  return { form, input, label };
}

function render(view) {
  for (const [value, button] of Object.entries(view.buttons)) button.setAttribute("aria-pressed", String(view.value === value));
  view.el.dataset.feedback = view.value || "";
}

function openComment(view) {
  const { form, input, label } = view.comment;
  label.textContent = view.value === "down" ? "What was wrong with it? (optional)" : "What was good about it? (optional)";
  input.value = view.text;
  // The form goes under the run's status line, where there is room for it.
  if (!form.isConnected) view.el.closest(".run-status-row")?.after(form);
  form.hidden = false;
  input.focus();
}

async function send(view, value, comment) {
  view.status.textContent = "";
  const result = await api(`runs/${view.runId}/feedback/`, { method: "POST", body: { value, comment } });
  if (!result.ok) {
    view.status.textContent = errorText(result, "Your feedback could not be saved.");
    return false;
  }
  view.value = result.data.value;
  view.text = result.data.comment || "";
  render(view);
  announce(THUMBS[view.value].said);
  return true;
}

async function takeBack(view) {
  const result = await api(`runs/${view.runId}/feedback/`, { method: "DELETE" });
  if (!result.ok) {
    view.status.textContent = errorText(result, "Your feedback could not be removed.");
    return;
  }
  view.value = null;
  view.text = "";
  view.status.textContent = "";
  view.comment.form.hidden = true;
  render(view);
  announce("Feedback removed");
}

/** The thumbs of a top-level run's answer (an empty, hidden element for a viewer
 * who is not the chat's owner: feedback is the owner's). */
export function feedbackControls(run) {
  if (config.session.owner.id !== config.user.id) return el("span", { hidden: true });
  const known = given.get(run.id);
  const view = { runId: run.id, value: known ? known.value : null, text: known ? known.comment || "" : "", buttons: {} };
  for (const [value, thumb] of Object.entries(THUMBS)) {
    const button = el("button", { type: "button", class: "button button-small button-ghost thumb", "aria-pressed": "false", "aria-label": thumb.label, title: thumb.label, "data-testid": `feedback-${value}` }, icon(thumb.path));
    button.addEventListener("click", async () => {
      if (view.value === value) takeBack(view);
      // Another thumb is new feedback: its comment starts empty.
      else if (await send(view, value, "")) openComment(view);
    });
    view.buttons[value] = button;
  }
  view.status = el("span", { class: "feedback-status muted", role: "status", "data-testid": "feedback-status" });
  view.el = el("span", { class: "feedback", role: "group", "aria-label": "Feedback on this answer", "data-testid": "feedback" }, view.buttons.up, view.buttons.down, view.status);
  view.comment = commentForm(view);
  render(view);
  return view.el;
}
