// The chat page's model: the session, its runs, their turns and tool calls (by id, as
// the events built them), what the page is doing (sending, stopping), and the
// questions the rest of the page asks about them.

/** The page's <script type="application/json" id="chat-data">: the session, the
 * signed-in user, the URLs to use, and the runs still open. */
export const config = JSON.parse(document.getElementById("chat-data").textContent);

export const TERMINAL = new Set(["completed", "failed", "canceled", "timed_out"]);

export const state = {
  seen: 0, // the highest seq applied
  caughtUp: false, // the first backlog has been applied
  sessionStatus: config.session.status,
  runs: new Map(), // run id -> run view
  calls: new Map(), // tool call id -> card
  turns: new Map(), // turn id -> message view
  slots: new Map(), // turn id -> the place of its reasoning, before its answer
  cutOff: new Set(), // ids of turns whose reply the output length limit cut off
  sending: false,
  pendingSend: null, // {signature, key}: an Idempotency-Key kept until the send succeeds
  stopping: new Set(),
  gone: "", // "deleted": the chat was deleted; "forbidden": this page may not follow it
  interrupted: new Set(config.open_runs.filter((r) => r.interrupted).map((r) => r.id)),
};

const listeners = [];

/** Calls `listener` whenever what a run or the session is doing may have changed. */
export function onStateChange(listener) {
  listeners.push(listener);
}

export function stateChanged() {
  for (const listener of listeners) listener();
}

/** How a person who decided or wrote something is named on this page. */
export function who(userId) {
  if (userId === null || userId === undefined) return "someone";
  if (userId === config.user.id) return "you";
  if (userId === config.session.owner.id) return config.session.owner.username;
  return `user #${userId}`;
}

/** The top-level run at work (or waiting for the user), or null: the oldest that
 * has not ended. A session runs one message at a time; the others wait behind it. */
export function activeRun() {
  for (const run of state.runs.values()) {
    if (!run.parentRun && !TERMINAL.has(run.status)) return run;
  }
  return null;
}

/** Whether the run waits for the runs before it to end (run.queued, until it starts). */
export function isQueued(run) {
  return run.status === "pending" && Boolean(run.queuedBehind);
}

/** What a waiting run waits for, following a delegation down to the child run
 * that asks: {run, kind, card} or null. */
export function waitingFor(run) {
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

/** The card of the question the run waits on, if the composer can answer it. */
export function pendingQuestion(run) {
  const waiting = run ? waitingFor(run) : null;
  if (!waiting || waiting.kind !== "question" || !waiting.card) return null;
  return waiting.card.pending && waiting.card.pending.kind === "question" ? waiting.card : null;
}

export function answerText(run) {
  if (run.output) return run.output;
  return run.messages.map((m) => m.text).filter(Boolean).join("\n\n");
}

/** The exchange as text, with each tool call's arguments and outcome. */
export function answerWithTools(run) {
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
