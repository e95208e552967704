// The transcript follows the bottom only while the reader is near it; otherwise a
// "Scroll to bottom" button appears.
import { $ } from "./dom.js";

const transcript = $("#transcript");
const scrollButton = $('[data-action="scroll-bottom"]');
let stick = true;
let renderQueued = false;

const nearBottom = () => transcript.scrollHeight - transcript.scrollTop - transcript.clientHeight < 120;

/** Call after the transcript changed: once a frame, it follows or offers the button. */
export function rendered() {
  if (renderQueued) return;
  renderQueued = true;
  requestAnimationFrame(() => {
    renderQueued = false;
    if (stick) transcript.scrollTop = transcript.scrollHeight;
    else scrollButton.hidden = false;
  });
}

export function scrollToBottom() {
  stick = true;
  transcript.scrollTop = transcript.scrollHeight;
  scrollButton.hidden = true;
}

export function startScroll() {
  transcript.addEventListener("scroll", () => {
    stick = nearBottom();
    if (stick) scrollButton.hidden = true;
  });
  scrollButton.addEventListener("click", scrollToBottom);
}
