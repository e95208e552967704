// The page's two <dialog>s (templates/base.html): confirmations and the shortcut sheet.

/** A modal confirmation; resolves to true when confirmed. */
export function confirmDialog(message, { title = "Are you sure?", ok = "OK" } = {}) {
  const dialog = document.getElementById("confirm-dialog");
  if (!dialog || typeof dialog.showModal !== "function") return Promise.resolve(window.confirm(message));
  dialog.querySelector("#confirm-title").textContent = title;
  dialog.querySelector("#confirm-message").textContent = message;
  dialog.querySelector('[value="ok"]').textContent = ok;
  dialog.returnValue = "";
  dialog.showModal();
  dialog.querySelector('[value="cancel"]').focus();
  return new Promise((resolve) => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
  });
}

export function showShortcuts() {
  const dialog = document.getElementById("shortcuts-dialog");
  if (dialog && !dialog.open) dialog.showModal();
}
