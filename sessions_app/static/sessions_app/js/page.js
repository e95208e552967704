// What every signed-in page does: the shortcuts ?, n and / (unless the user turned
// single-key shortcuts off), and menus that close on a click outside them or on Esc.
// The chat page adds its own shortcuts (shortcuts.js).
import { showShortcuts } from "./dialogs.js";
import { isTyping, singleKeysOn } from "./dom.js";

function onGlobalKey(event) {
  if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey || !singleKeysOn()) return;
  if (document.querySelector("dialog[open]")) return;
  if (isTyping(event)) return;
  if (event.key === "?") {
    event.preventDefault();
    showShortcuts();
  } else if (event.key === "n") {
    event.preventDefault();
    window.location.href = "/sessions/new/";
  } else if (event.key === "/") {
    const search = document.querySelector('[data-shortcut="search"]');
    if (search) {
      event.preventDefault();
      openSidebar();
      search.focus();
    }
  }
}

/** On a small screen the chat page's search box is in the folded sidebar. */
function openSidebar() {
  const toggle = document.querySelector('.sidebar-toggle[data-action="toggle-sidebar"]');
  if (toggle && getComputedStyle(toggle).display !== "none" && toggle.getAttribute("aria-expanded") !== "true") toggle.click();
}

export function startPage() {
  document.addEventListener("keydown", onGlobalKey);
  document.addEventListener("click", (event) => {
    const target = event.target instanceof Element ? event.target : null;
    if (target && target.closest('[data-action="show-shortcuts"]')) showShortcuts();
    // A click outside an open menu closes it.
    for (const menu of document.querySelectorAll("details.menu[open]")) {
      if (!target || !menu.contains(target)) menu.removeAttribute("open");
    }
  });
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    for (const menu of document.querySelectorAll("details.menu[open]")) {
      menu.removeAttribute("open");
      menu.querySelector("summary")?.focus();
    }
  });
}
