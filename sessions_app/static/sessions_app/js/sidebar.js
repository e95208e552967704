// The chat page's sidebar of chats, folded away on small screens behind a menu button.
import { $ } from "./dom.js";

const sidebar = $("#sidebar");
const scrim = $(".sidebar-scrim");

function toggleSidebar(force) {
  const toggle = $('.sidebar-toggle[data-action="toggle-sidebar"]');
  const open = force ?? !document.body.classList.contains("sidebar-open");
  document.body.classList.toggle("sidebar-open", open);
  toggle.setAttribute("aria-expanded", String(open));
  scrim.hidden = !open;
  if (open) sidebar.querySelector("input, a")?.focus();
}

export function startSidebar() {
  for (const node of document.querySelectorAll('[data-action="toggle-sidebar"]')) node.addEventListener("click", () => toggleSidebar());
  sidebar.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && document.body.classList.contains("sidebar-open")) toggleSidebar(false);
  });
}
