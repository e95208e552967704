// The settings page: the forms work without this script; it adds a copy button to
// a new token, asks before a token is revoked, and names the browser's time zone.
import { copyButton } from "./clipboard.js";
import { confirmDialog } from "./dialogs.js";
import { $ } from "./dom.js";
import { startPage } from "./page.js";

function showBrowserZone() {
  const note = $('[data-role="browser-zone"]');
  const zone = Intl.DateTimeFormat().resolvedOptions().timeZone;
  if (note && zone) note.textContent = `Your browser's is ${zone}.`;
}

function offerCopy() {
  const value = $('[data-role="token-value"]');
  const holder = $('[data-role="token-copy"]');
  if (!value || !holder) return;
  holder.replaceChildren(copyButton(() => value.textContent, "Copy token"));
  holder.firstElementChild.focus();
}

function confirmRevokes() {
  for (const form of document.querySelectorAll(".revoke-form")) {
    form.addEventListener("submit", async (event) => {
      if (form.dataset.confirmed === "yes") return;
      event.preventDefault();
      const ok = await confirmDialog(`Scripts that use “${form.dataset.name}” stop working at once, and so do the tokens made with it.`, { title: "Revoke this token?", ok: "Revoke" });
      if (!ok) return;
      form.dataset.confirmed = "yes";
      form.requestSubmit();
    });
  }
}

startPage();
showBrowserZone();
offerCopy();
confirmRevokes();
