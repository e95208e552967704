// Markdown in answers, safely: the one renderer of the chat and the admin timeline.
//
// marked turns the text into HTML, in which HTML the text itself contains is shown
// as text (a model or a tool repeating "<img onerror=...>" shows those characters)
// and an image is a link to it (nothing is fetched from an address an answer names).
// DOMPurify then keeps only the markup listed below and hands back DOM nodes (no
// HTML string is ever assigned to the page). Links open in a new tab, without the
// opener or a referrer, and only to http(s) and mailto addresses. Code blocks are
// highlighted by highlight.js and get a copy button.
import DOMPurify from "../vendor/dompurify/purify.es.js";
import hljs from "../vendor/highlight.js/highlight.min.js";
import { Marked } from "../vendor/marked/marked.esm.js";
import { copyButton } from "./clipboard.js";
import { el } from "./dom.js";

const TAGS = [
  "a", "blockquote", "br", "code", "del", "em", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "li", "ol",
  "p", "pre", "s", "strong", "table", "tbody", "td", "th", "thead", "tr", "ul",
];
const ATTRIBUTES = ["align", "class", "href", "start", "title"];
const SAFE_LINK = /^(?:https?|mailto):/i;
// Guessing the language of a long unlabelled block costs more than it gives.
const MAX_GUESSED = 5000;

function escapeHtml(text) {
  return String(text).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

const marked = new Marked({
  gfm: true,
  breaks: true, // a line break in an answer is one on screen, as before markdown
  renderer: {
    html(token) {
      const text = escapeHtml(token.text.replace(/\n+$/, "")).replace(/\n/g, "<br>");
      return token.block ? `<p>${text}</p>` : text;
    },
    image(token) {
      return `<a href="${escapeHtml(token.href)}">${escapeHtml(token.text || token.href)}</a>`;
    },
    checkbox(token) {
      return token.checked ? "☑ " : "☐ ";
    },
  },
});

const purifier = DOMPurify(window);
purifier.addHook("uponSanitizeAttribute", (node, data) => {
  // Classes are the code's language only: an answer cannot style itself as the page.
  if (data.attrName === "class") data.keepAttr = node.nodeName === "CODE" && /^language-[\w+#.-]+$/.test(data.attrValue);
});
purifier.addHook("afterSanitizeAttributes", (node) => {
  if (node.nodeName !== "A") return;
  if (node.hasAttribute("href") && SAFE_LINK.test(node.getAttribute("href"))) {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  } else {
    node.removeAttribute("href");
  }
});

const SANITIZE = {
  ALLOWED_TAGS: TAGS,
  ALLOWED_ATTR: ATTRIBUTES,
  ALLOWED_URI_REGEXP: SAFE_LINK,
  ALLOW_DATA_ATTR: false,
  RETURN_DOM_FRAGMENT: true,
};

function highlight(code) {
  const language = /language-([\w+#.-]+)/.exec(code.className);
  if (language && !hljs.getLanguage(language[1])) code.classList.add("nohighlight");
  else if (!language && code.textContent.length > MAX_GUESSED) code.classList.add("nohighlight");
  else hljs.highlightElement(code);
}

/** A code block with its language and a copy button above it. */
function codeBlock(pre) {
  const code = pre.querySelector("code");
  const language = code ? /language-([\w+#.-]+)/.exec(code.className) : null;
  if (code) highlight(code);
  const bar = el(
    "div",
    { class: "code-bar" },
    el("span", { class: "code-language" }, language ? language[1] : "code"),
    copyButton(() => (code || pre).textContent.replace(/\n$/, ""), "Copy code"),
  );
  bar.lastChild.dataset.testid = "code-copy";
  const block = el("div", { class: "code-block", "data-testid": "code-block" });
  pre.replaceWith(block);
  block.append(bar, pre);
}

/** The markdown `text` as safe DOM nodes. */
export function markdownNodes(text) {
  const fragment = purifier.sanitize(marked.parse(String(text || "")), SANITIZE);
  for (const pre of fragment.querySelectorAll("pre")) codeBlock(pre);
  return fragment;
}

/** Draws the markdown `text` into `target`, replacing what it held. */
export function renderMarkdown(target, text) {
  target.replaceChildren(markdownNodes(text));
}

/** Draws each element under `root` whose text is markdown (`data-markdown`, as
 * the server wrote it) as markdown, once. */
export function renderMarkdownIn(root = document) {
  for (const source of root.querySelectorAll('[data-markdown=""]')) {
    source.dataset.markdown = "rendered";
    renderMarkdown(source, source.textContent);
  }
}
