// A paused tool call's form: Approve, or Deny with a reason, for an approval; an
// answer box for a question. Its states are idle → sending → done | expired (the
// server said 409) | error (try again).
import { api, errorText } from "./api.js";
import { jsonBlock, reveal } from "./cards.js";
import { el, uid } from "./dom.js";
import { config, state } from "./state.js";

/** Shows the form in the card and opens the card; card.pending holds its state. */
export function showPending(card, kind, question) {
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
