// Tool-call cards: name, state, duration, and on expanding the result (or error) and
// the arguments as pretty JSON. Several calls in a row fold into one "Used n tools"
// line that opens by itself while one of them is active.
import { copyButton } from "./clipboard.js";
import { el, uid } from "./dom.js";
import { formatDuration, formatTime } from "./format.js";
import { ensureRun } from "./render.js";
import { state, who } from "./state.js";

const LONG_OUTPUT = 1500; // characters of pretty JSON shown before "Show all"

const CARD_STATE_LABEL = {
  scheduled: "scheduled",
  running: "running",
  succeeded: "succeeded",
  failed: "failed",
  canceled: "canceled",
  awaiting_approval: "needs approval",
  awaiting_answer: "needs your answer",
  awaiting_caller: "waiting for the caller's result",
  approved: "approved",
  denied: "denied",
  answered: "answered",
};

/** The states of a call that has not reached its outcome yet. */
export const OPEN_CARD = new Set(["scheduled", "running", "awaiting_approval", "awaiting_answer", "awaiting_caller", "approved"]);

function pretty(value) {
  if (value === undefined) return "";
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

/** A <pre> of JSON with a copy button, truncated with "Show all" when long. */
export function jsonBlock(label, value, testid) {
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
  const active = group.cards.some((c) => OPEN_CARD.has(c.status) || c.needsEye);
  const failed = group.cards.filter((c) => c.status === "failed" || c.status === "denied").length;
  group.summary.textContent = `Used ${group.cards.length} tools: ${names.join(", ")}${failed ? ` (${failed} failed)` : ""}`;
  const expanded = group.userExpanded ?? active;
  group.toggle.setAttribute("aria-expanded", String(expanded));
  group.body.hidden = !expanded;
  group.el.dataset.state = active ? "active" : failed ? "failed" : "done";
}

/** The card of this tool call, drawn in its run the first time it is named. */
export function ensureCard(toolCallId, runId, info = {}) {
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

export function renderArgs(card) {
  card.argsArea.replaceChildren(jsonBlock("Arguments", card.arguments, "tool-arguments"));
}

export function setCardStatus(card, status) {
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

export function renderOutcome(card) {
  if (card.error) {
    card.resultArea.replaceChildren(
      el("section", { class: "block block-error", "data-testid": "tool-error" }, el("h4", {}, `Error: ${card.error.kind || "error"}`), el("p", {}, card.error.message || "")),
    );
  } else if (card.result !== undefined) {
    card.resultArea.replaceChildren(jsonBlock("Result", card.result, "tool-result"));
  }
}

/** Expand a card and everything around it (a child run's card sits in its parent's). */
export function reveal(card) {
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

/** Moves the keyboard to what a card says once it settles, if the person acted on
 * it (card.focusOnSettle, respond.js) and the control they used is gone: focus
 * would otherwise fall to the top of the page. Focus they put elsewhere stays. */
export function settleFocus(card, target) {
  const acted = card.focusOnSettle;
  card.focusOnSettle = false;
  const active = document.activeElement;
  const lost = !active || active === document.body || !active.isConnected || card.el.contains(active);
  if (!acted || !lost || !target.isConnected) return;
  target.setAttribute("tabindex", "-1");
  target.focus();
}

/** A question's card, answered: what it asked and the answer given. */
function answeredQuestion(card) {
  const question = card.question || (card.arguments && card.arguments.question) || "";
  return el(
    "div",
    { class: "answered-question", "data-testid": "answered-question" },
    question ? el("p", { class: "question", "data-testid": "question" }, question) : null,
    el("p", { class: "answer", "data-testid": "question-answer" }, el("span", { class: "answer-label" }, "Answer: "), card.answer),
  );
}

/** Who approved, denied or answered the call (with the answer), and when: the card
 * settles read-only. A question's card shows what it asked and the answer. */
export function showDecision(card, at) {
  const verb = { approved: "Approved", denied: "Denied", answered: "Answered" }[card.decision] || card.decision;
  const parts = [`${verb} by ${who(card.decidedBy)}`];
  if (at) parts.push(` · ${formatTime(at)}`);
  if (card.reason) parts.push(` — “${card.reason}”`);
  else if (card.decision === "answered" && card.answer) parts.push(` — “${card.answer}”`);
  card.decisionEl.textContent = parts.join("");
  card.decisionEl.hidden = false;
  const answered = card.decision === "answered" && card.answer ? answeredQuestion(card) : null;
  // Above the note, the answer is not repeated in it.
  const said = answered ? parts.slice(0, at ? 2 : 1).join("") : parts.join("");
  const note = el("p", { class: "tool-decision tool-decision-inline", "data-testid": "decision-note" }, said);
  card.actionArea.replaceChildren(...(answered ? [answered, note] : [note]));
  card.actionArea.hidden = false;
  settleFocus(card, note);
}
