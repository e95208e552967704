// The operators' lists (the admin's changelists and record pages): a list shows
// ids cut to eight characters, with a copy button beside each that copies the whole
// id (its data-copy attribute). One listener for the page, so rows added later work too.
import { copyText } from "./clipboard.js";

const SHOWN_MS = 1500;

async function copyId(button) {
  const copied = await copyText(button.dataset.copy || "");
  button.dataset.state = copied ? "copied" : "failed";
  button.title = copied ? "Copied" : "Copy failed";
  window.setTimeout(() => {
    delete button.dataset.state;
    button.title = button.dataset.title || "";
  }, SHOWN_MS);
}

document.addEventListener("click", (event) => {
  const button = event.target.closest("button.goaai-copy");
  if (!button) return;
  // Inside a changelist's form: a copy is not a submit, nor a click on the row.
  event.preventDefault();
  event.stopPropagation();
  if (!button.dataset.title) button.dataset.title = button.title;
  copyId(button);
});
