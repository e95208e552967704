// A paused tool call's form: Approve, or Deny with a reason, for an approval; for a
// question, its choices as buttons (one click answers; when several may be picked,
// they toggle and Send answers) and an answer box for words of your own. Its states
// are idle → sending → done | expired (the server said 409) | error (try again).
import { api, errorText } from "./api.js";
import { jsonBlock, reveal, settleFocus } from "./cards.js";
import { el, uid } from "./dom.js";
import { config, state } from "./state.js";

/** The choices of a question as buttons: a click answers with that one, or, when
 * several may be picked, toggles it (aria-pressed) and Send answers with those on. */
function choiceButtons(awaiting, send) {
  const choices = Array.isArray(awaiting.choices) ? awaiting.choices.map(String) : [];
  if (!choices.length) return null;
  const multiple = Boolean(awaiting.multiple);
  const group = el("div", { class: "choices", role: "group", "aria-label": multiple ? "Pick any of these" : "Pick one", "data-testid": "choices", dataset: { multiple: String(multiple) } });
  const buttons = choices.map((choice) => el("button", { type: "button", class: "button button-small choice", "data-testid": "choice-button", ...(multiple ? { "aria-pressed": "false" } : {}) }, choice));
  group.append(...buttons);
  if (!multiple) {
    buttons.forEach((button, index) => button.addEventListener("click", () => send({ choices: [choices[index]] })));
    return { group, refresh() {} };
  }
  const picked = () => choices.filter((_, index) => buttons[index].getAttribute("aria-pressed") === "true");
  const sendPicked = el("button", { type: "button", class: "button button-primary button-small", "data-testid": "choices-send" }, "Send choices");
  for (const button of buttons) {
    button.addEventListener("click", () => {
      button.setAttribute("aria-pressed", String(button.getAttribute("aria-pressed") !== "true"));
      sendPicked.disabled = picked().length === 0;
    });
  }
  sendPicked.addEventListener("click", () => {
    if (picked().length) send({ choices: picked() });
  });
  sendPicked.disabled = true;
  group.append(sendPicked);
  // Send stays off until something is picked, whatever state the form is in.
  const refresh = () => {
    if (!picked().length) sendPicked.disabled = true;
  };
  return { group, refresh };
}

/** Shows the form in the card and opens the card; card.pending holds its state.
 * For a question, ``awaiting`` is what the run waits for (its question, choices). */
export function showPending(card, kind, awaiting = {}) {
  const run = state.runs.get(card.runId);
  const status = el("p", { class: "pending-status", role: "status", tabindex: "-1", "data-testid": "respond-status" });
  let controls;
  let choices = null;
  const pending = { kind, state: "idle", used: null };
  const setState = (next, message = "") => {
    pending.state = next;
    card.actionArea.dataset.respondState = next;
    status.textContent = message;
    const off = next === "sending" || next === "done";
    // A control about to be disabled would drop the focus to the top of the page:
    // the status line takes it while the answer goes, the control gets it back on error.
    if (off && controls.contains(document.activeElement)) status.focus();
    for (const control of controls.querySelectorAll("button, input, textarea")) control.disabled = off;
    if (choices) choices.refresh();
    if (next === "error" && pending.used && pending.used.isConnected && document.activeElement === status) pending.used.focus();
  };
  const send = async (body) => {
    if (pending.state === "sending" || pending.state === "done" || pending.state === "expired") return;
    const active = document.activeElement;
    card.focusOnSettle = card.actionArea.contains(active);
    pending.used = card.focusOnSettle ? active : null;
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
    choices = choiceButtons(awaiting, send);
    controls = el(
      "form",
      { class: "answer-form", "data-testid": "answer-form" },
      el("p", { class: "question", "data-testid": "question" }, awaiting.question || "The agent asks you something."),
      choices && choices.group,
      el("label", { for: inputId }, choices ? "Or answer in your own words" : "Your answer"),
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
    const said = el("p", { class: "pending-status", "data-testid": "respond-status" }, message);
    card.actionArea.replaceChildren(said);
    if (card.pending === pending) card.pending = null;
    settleFocus(card, said);
  };
  card.pending = pending;
  if (kind === "question" && awaiting.question) card.question = awaiting.question;
  if (!config.may.respond) {
    // Someone else's chat, read only: what the run waits for, without the controls.
    const owner = config.session.owner.username;
    const waitingFor = kind === "question" ? `an answer from ${owner}` : `${owner}'s decision`;
    status.textContent = `Waiting for ${waitingFor}.`;
    controls = el("div", { class: "read-only", "data-testid": "respond-read-only" });
  }
  card.actionArea.replaceChildren(controls, status);
  card.actionArea.hidden = false;
  card.actionArea.dataset.respondState = "idle";
  reveal(card);
}
