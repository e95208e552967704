// goaai: the chat page. The transcript is rebuilt from the session's event log: the
// WebSocket sends every event after the last sequence number this page has seen
// (0 at first), then live events and token deltas. An event already seen is dropped
// by its seq, so reconnecting never duplicates or wipes anything on screen.
import { chatGone, clearComposerError, focusComposer, startComposer, updateComposer } from "./composer.js";
import { $, isTyping } from "./dom.js";
import { loadMemory, startDrawer } from "./drawer.js";
import { applyDelta, applyEvent } from "./events.js";
import { startHeader } from "./header.js";
import { renderMarkdownIn } from "./markdown.js";
import { startPage } from "./page.js";
import { loadSessionReasoning } from "./reasoning.js";
import { renderRun } from "./render.js";
import { scrollToBottom, startScroll } from "./scroll.js";
import { startSessionList } from "./session-list.js";
import { startShortcuts } from "./shortcuts.js";
import { startSidebar } from "./sidebar.js";
import { startSocket } from "./socket.js";
import { activeRun, config, state } from "./state.js";

/** The history is on screen (the first backlog is applied): show the page. */
function onCaughtUp() {
  // Connected again: an error that said the server could not be reached is over.
  clearComposerError();
  onFirstCatchUp();
}

function onFirstCatchUp() {
  if (state.caughtUp) return;
  state.caughtUp = true;
  const transcript = $("#transcript");
  $('[data-role="loading"]', transcript)?.remove();
  $('[data-role="intro"]', transcript).hidden = state.runs.size > 0;
  for (const run of state.runs.values()) renderRun(run);
  updateComposer();
  scrollToBottom();
  loadMemory();
  loadSessionReasoning();
  if (!activeRun() && state.sessionStatus !== "ended" && !isTyping({ target: document.activeElement })) focusComposer({ preventScroll: true });
}

startPage();
// The answers of the conversation a fork continues, which the server wrote.
renderMarkdownIn($("#transcript"));
startSessionList();
startScroll();
startHeader();
startComposer();
startDrawer();
startSidebar();
startShortcuts();
startSocket({
  path: config.urls.websocket,
  loginUrl: config.urls.login,
  lastSeen: () => state.seen,
  onEvent: applyEvent,
  onDelta: applyDelta,
  onCaughtUp,
  onGone: chatGone,
});
