// The admin timeline's model replies drawn as markdown, with the chat's renderer
// (sanitized: see sessions_app/js/markdown.js). The reply's text stays in its <pre>,
// hidden, which is what Copy copies and what "Source" shows; tool results and event
// data are shown as they are. A reply loaded in full ("Show all") is drawn again.
import { renderMarkdown } from "../sessions_app/js/markdown.js";

function draw(source) {
  let view = source.previousElementSibling;
  if (!view || !view.classList.contains("tl-markdown")) {
    view = document.createElement("div");
    view.className = "tl-markdown markdown";
    view.dataset.testid = "timeline-markdown";
    source.before(view);
    const toggle = document.createElement("button");
    toggle.type = "button";
    toggle.className = "tl-source-toggle";
    toggle.textContent = "Source";
    toggle.setAttribute("aria-pressed", "false");
    toggle.addEventListener("click", () => {
      const showSource = toggle.getAttribute("aria-pressed") !== "true";
      toggle.setAttribute("aria-pressed", String(showSource));
      source.hidden = !showSource;
      view.hidden = showSource;
    });
    source.closest(".tl-value")?.querySelector(".tl-value-bar")?.append(toggle);
  }
  renderMarkdown(view, source.textContent);
  source.hidden = view.hidden === false;
}

function drawAll() {
  for (const source of document.querySelectorAll("pre[data-markdown-source]")) draw(source);
}

document.addEventListener("tl:value-loaded", (event) => {
  if (event.target instanceof HTMLElement && event.target.matches("pre[data-markdown-source]")) draw(event.target);
});
drawAll();
