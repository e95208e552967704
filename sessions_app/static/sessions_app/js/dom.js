// Building the page with the DOM. Data is always set as text, never parsed as HTML.

export const $ = (selector, root = document) => root.querySelector(selector);

/** el("div", {class: "x", dataset: {a: 1}, hidden: true}, "text", child) */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (value === true) node.setAttribute(key, "");
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

let idCounter = 0;
/** An id unique in the page, for aria-controls and <label for>. */
export const uid = (prefix) => `${prefix}-${++idCounter}`;

/** Whether a key press happens while the user is typing somewhere. */
export function isTyping(event) {
  const target = event.target;
  if (!(target instanceof HTMLElement)) return false;
  return target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName);
}

/** Whether single-key shortcuts are on: the user can turn them off on the settings
 * page (WCAG 2.1.4), and the page then carries data-shortcuts="off". */
export function singleKeysOn() {
  return document.body.dataset.shortcuts !== "off";
}

/** Says something to screen readers through the page's polite live region. */
export function announce(text) {
  const region = document.getElementById("announcer") || document.getElementById("list-status");
  if (!region) return;
  // Clearing first makes screen readers read a repeated message again.
  region.textContent = "";
  setTimeout(() => {
    region.textContent = text;
  }, 50);
}
