// The chat page's keyboard shortcuts (page.js has those of every page): i or
// Shift+Esc focus the message box, Esc stops the run, c copies the last answer, m
// shows or hides memory. Single keys act only when the user is not typing, and not
// at all when the user turned them off (the Esc keys still work).
import { copyText } from "./clipboard.js";
import { focusComposer, stopRun } from "./composer.js";
import { announce, isTyping, singleKeysOn } from "./dom.js";
import { toggleMemory } from "./drawer.js";
import { activeRun, answerText, state } from "./state.js";

function onKey(event) {
  if (event.ctrlKey || event.metaKey || event.altKey || document.querySelector("dialog[open]")) return;
  if (event.key === "Escape" && event.shiftKey) {
    event.preventDefault();
    focusComposer();
    return;
  }
  if (event.key === "Escape" && !isTyping(event) && activeRun()) {
    event.preventDefault();
    stopRun();
    return;
  }
  if (isTyping(event) || !singleKeysOn()) return;
  if (event.key === "i") {
    event.preventDefault();
    focusComposer();
  } else if (event.key === "c") {
    const last = Array.from(state.runs.values()).filter((r) => !r.parentRun && answerText(r)).pop();
    if (last) {
      event.preventDefault();
      copyText(answerText(last)).then((ok) => announce(ok ? "Copied the last answer" : "Could not copy"));
    }
  } else if (event.key === "m") {
    event.preventDefault();
    toggleMemory();
  }
}

export function startShortcuts() {
  document.addEventListener("keydown", onKey);
}
