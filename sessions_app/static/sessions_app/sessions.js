// goaai: what every page shares (API calls, DOM building, dialogs, shortcuts), and
// the session list: deleting with confirmation and live updates over /ws/sessions/.
// Plain DOM: data is always set with textContent, never parsed as HTML.

export const API = "/api/v1/";

// How a run's status reads in a badge (sessions_app.views.RUN_STATUS_LABELS).
export const RUN_STATUS_LABELS = {
  pending: "queued",
  running: "running",
  awaiting_input: "needs you",
  completed: "done",
  failed: "failed",
  canceled: "stopped",
  timed_out: "timed out",
};

export function csrfToken() {
  const match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
  return match ? decodeURIComponent(match[1]) : "";
}

/** Calls the REST API; resolves to {ok, status, data} and never throws (status 0:
 * the network failed). Unsafe methods carry the CSRF token. */
export async function api(path, { method = "GET", body, headers = {} } = {}) {
  const init = { method, credentials: "same-origin", headers: { Accept: "application/json", ...headers } };
  if (!["GET", "HEAD"].includes(method)) init.headers["X-CSRFToken"] = csrfToken();
  if (body !== undefined) {
    init.headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  let response;
  try {
    response = await fetch(path.startsWith("/") ? path : API + path, init);
  } catch {
    return { ok: false, status: 0, data: null };
  }
  let data = null;
  if (response.status !== 204) {
    try {
      data = await response.json();
    } catch {
      data = null;
    }
  }
  return { ok: response.ok, status: response.status, data };
}

/** A readable sentence from an API error ({type, errors: [{detail}]}). */
export function errorText(result, fallback = "Something went wrong.") {
  if (result.status === 0) return "The server could not be reached. Check your connection and try again.";
  if (result.status === 401 || result.status === 403) return "You are signed out. Reload the page to sign in again.";
  if (result.status === 429) return "Too many messages in a short time. Wait a moment and try again.";
  const errors = result.data && Array.isArray(result.data.errors) ? result.data.errors : [];
  const text = errors.map((e) => e.detail).filter(Boolean).join(" ");
  return text || fallback;
}

/** el("div", {class: "x", dataset: {a: 1}, onclick: f}, "text", child) */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key === "dataset") Object.assign(node.dataset, value);
    else if (key === "text") node.textContent = value;
    else if (key.startsWith("on") && typeof value === "function") node.addEventListener(key.slice(2), value);
    else if (value === true) node.setAttribute(key, "");
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function formatTime(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  if (Number.isNaN(date.getTime())) return "";
  const today = new Date().toDateString() === date.toDateString();
  return today
    ? date.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" })
    : date.toLocaleString([], { dateStyle: "medium", timeStyle: "short" });
}

export function formatDuration(ms) {
  if (ms === null || ms === undefined || Number.isNaN(ms)) return "";
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60000) return `${(ms / 1000).toFixed(1)} s`;
  const minutes = Math.floor(ms / 60000);
  return `${minutes} min ${Math.round((ms % 60000) / 1000)} s`;
}

export async function copyText(text) {
  try {
    await navigator.clipboard.writeText(text);
    return true;
  } catch {
    // Without the async clipboard (an insecure origin), a selection still copies.
    const area = el("textarea", { class: "sr-only", "aria-hidden": "true" });
    area.value = text;
    document.body.append(area);
    area.select();
    let copied = false;
    try {
      copied = document.execCommand("copy");
    } catch {
      copied = false;
    }
    area.remove();
    return copied;
  }
}

/** A copy button that says "Copied" for a moment. */
export function copyButton(getText, label = "Copy") {
  const button = el("button", { type: "button", class: "button button-small button-ghost", "data-testid": "copy-button" }, label);
  button.addEventListener("click", async () => {
    const ok = await copyText(getText());
    button.textContent = ok ? "Copied" : "Copy failed";
    setTimeout(() => {
      button.textContent = label;
    }, 1500);
  });
  return button;
}

/** Whether a key press happens while the user is typing somewhere. */
export function isTyping(event) {
  const target = event.target;
  if (!(target instanceof HTMLElement)) return false;
  return target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName);
}

/** A modal confirmation (the page's <dialog>); resolves to true when confirmed. */
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

export function announce(text) {
  const region = document.getElementById("announcer") || document.getElementById("list-status");
  if (!region) return;
  // Clearing first makes screen readers read a repeated message again.
  region.textContent = "";
  setTimeout(() => {
    region.textContent = text;
  }, 50);
}

// Shortcuts every page has; the chat page adds its own (see chat.js).
function onGlobalKey(event) {
  if (event.defaultPrevented || event.ctrlKey || event.metaKey || event.altKey) return;
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

function showShortcuts() {
  const dialog = document.getElementById("shortcuts-dialog");
  if (dialog && !dialog.open) dialog.showModal();
}

function openSidebar() {
  const toggle = document.querySelector('.sidebar-toggle[data-action="toggle-sidebar"]');
  if (toggle && getComputedStyle(toggle).display !== "none" && toggle.getAttribute("aria-expanded") !== "true") toggle.click();
}

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

// The session list (the list page and the chat page's sidebar).

const list = document.getElementById("session-list");

function itemOf(sessionId) {
  return list ? list.querySelector(`[data-session-id="${CSS.escape(sessionId)}"]`) : null;
}

function removeItem(item) {
  const group = item.closest(".session-group");
  item.remove();
  if (group && !group.querySelector(".session-item")) group.remove();
}

async function deleteSession(button) {
  const item = button.closest(".session-item");
  const title = button.dataset.sessionTitle || "this chat";
  const ok = await confirmDialog(`“${title}” and everything in it (runs, tool calls, memory of this chat) will be deleted. This cannot be undone.`, {
    title: "Delete this chat?",
    ok: "Delete",
  });
  if (!ok) return;
  button.disabled = true;
  const result = await api(`sessions/${item.dataset.sessionId}/`, { method: "DELETE" });
  if (result.ok || result.status === 404) {
    removeItem(item);
    announce(`Deleted “${title}”.`);
  } else {
    button.disabled = false;
    announce(errorText(result, "The chat could not be deleted."));
    window.alert(errorText(result, "The chat could not be deleted."));
  }
}

function newItem(sessionId, data) {
  const title = data.title || "Untitled chat";
  const now = new Date();
  const item = el(
    "li",
    { class: "session-item is-new", dataset: { sessionId }, "data-testid": "session-item" },
    el(
      "a",
      { class: "session-link", href: `/sessions/${sessionId}/` },
      el("span", { class: "session-title", dataset: { role: "title" } }, title),
      el(
        "span",
        { class: "session-meta" },
        el("span", {}, data.agent || ""),
        " · ",
        el("time", { datetime: now.toISOString() }, now.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" })),
      ),
    ),
    el(
      "span",
      { class: "badges" },
      el("span", { class: "badge badge-active", dataset: { role: "session-status" }, "data-testid": "session-status" }, "active"),
      el("span", { class: "badge badge-run", dataset: { role: "run-status" }, "data-testid": "run-status", hidden: true }),
    ),
  );
  if (list.dataset.deletable === "true") {
    item.append(
      el(
        "button",
        {
          type: "button",
          class: "icon-button session-delete",
          dataset: { action: "delete-session", sessionTitle: title },
          "aria-label": `Delete chat ${title}`,
          title: "Delete",
        },
        trashIcon(),
      ),
    );
  }
  return item;
}

/** The trash-can icon of server-rendered rows (templates/sessions/_session_items.html). */
function trashIcon() {
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  for (const [name, value] of Object.entries({
    "aria-hidden": "true", width: "16", height: "16", viewBox: "0 0 24 24", fill: "none",
    stroke: "currentColor", "stroke-width": "2", "stroke-linecap": "round", "stroke-linejoin": "round",
  })) svg.setAttribute(name, value);
  const path = document.createElementNS("http://www.w3.org/2000/svg", "path");
  path.setAttribute("d", "M3 6h18M8 6V4h8v2M19 6l-1 14H6L5 6");
  svg.append(path);
  return svg;
}

function addItem(sessionId, data) {
  if (itemOf(sessionId)) return;
  let group = list.querySelector(".session-group");
  const firstTitle = group ? group.querySelector(".session-group-title") : null;
  if (!group || !firstTitle || firstTitle.textContent.trim() !== "Today") {
    const id = `group-live-${Date.now()}`;
    group = el("section", { class: "session-group", "aria-labelledby": id }, el("h2", { class: "session-group-title", id }, "Today"), el("ul", { class: "session-items", role: "list" }));
    list.prepend(group);
  }
  list.querySelector('[data-testid="empty-list"]')?.remove();
  group.querySelector(".session-items").prepend(newItem(sessionId, data));
}

function setRunBadge(item, status) {
  const badge = item.querySelector('[data-role="run-status"]');
  if (!badge) return;
  badge.hidden = false;
  badge.className = `badge badge-run badge-${status}`;
  badge.textContent = RUN_STATUS_LABELS[status] || status;
}

const RUN_EVENT_STATUS = {
  "run.created": "pending",
  "run.started": "running",
  "run.awaiting_input": "awaiting_input",
  "run.resumed": "running",
  "run.completed": "completed",
  "run.failed": "failed",
  "run.canceled": "canceled",
  "run.timed_out": "timed_out",
};

function onListEvent(event) {
  const sessionId = event.session;
  if (!sessionId) return;
  const listData = readListData();
  if (event.type === "session.created") {
    if (listData.live) addItem(sessionId, event.data || {});
    return;
  }
  const item = itemOf(sessionId);
  if (event.type === "session.deleted") {
    if (item) removeItem(item);
    return;
  }
  if (!item) return;
  if (event.type === "session.updated" && event.data && typeof event.data.title === "string") {
    const title = item.querySelector('[data-role="title"]');
    if (event.data.title) title.textContent = event.data.title;
    item.querySelector(".session-delete")?.setAttribute("data-session-title", event.data.title || "Untitled chat");
  } else if (event.type === "session.ended") {
    const badge = item.querySelector('[data-role="session-status"]');
    badge.className = "badge badge-ended";
    badge.textContent = "ended";
  } else if (event.type in RUN_EVENT_STATUS) {
    // A child run (an agent called as a tool) does not change the chat's badge.
    if (event.type === "run.created" && event.data && event.data.parent_run) return;
    if (event.type !== "run.created" && childRuns.has(event.run)) return;
    setRunBadge(item, RUN_EVENT_STATUS[event.type]);
    if (event.type === "run.created" && event.data && event.data.input) {
      const title = item.querySelector('[data-role="title"]');
      if (title.textContent === "Untitled chat") title.textContent = event.data.input.slice(0, 60);
    }
  }
}

const childRuns = new Set();

function readListData() {
  const node = document.getElementById("list-data");
  if (node) return JSON.parse(node.textContent);
  return { live: true, query: "" };
}

/** The list is not replayed after a lost connection: read it again from the page. */
async function reloadList() {
  try {
    const response = await fetch(window.location.href, { credentials: "same-origin" });
    if (!response.ok) return;
    const page = new DOMParser().parseFromString(await response.text(), "text/html");
    const fresh = page.getElementById("session-list");
    if (fresh) list.replaceChildren(...Array.from(fresh.childNodes, (node) => document.importNode(node, true)));
  } catch {
    // The next reconnection tries again.
  }
}

function watchList() {
  let attempt = 0;
  let connectedBefore = false;
  const connect = () => {
    const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    const socket = new WebSocket(`${scheme}//${window.location.host}/ws/sessions/`);
    socket.addEventListener("message", (message) => {
      let frame;
      try {
        frame = JSON.parse(message.data);
      } catch {
        return;
      }
      if (frame.type === "ready") {
        if (connectedBefore) reloadList();
        connectedBefore = true;
        attempt = 0;
      } else if (frame.type === "event" && frame.event) {
        if (frame.event.type === "run.created" && frame.event.data && frame.event.data.parent_run) childRuns.add(frame.event.run);
        onListEvent(frame.event);
      }
    });
    socket.addEventListener("close", (event) => {
      if ([4401, 4403].includes(event.code)) return;
      attempt += 1;
      setTimeout(connect, Math.min(30000, 1000 * 2 ** Math.min(attempt, 5)) + Math.random() * 500);
    });
  };
  connect();
}

if (list) {
  list.addEventListener("click", (event) => {
    const button = event.target instanceof Element ? event.target.closest('[data-action="delete-session"]') : null;
    if (button) deleteSession(button);
  });
  if ("WebSocket" in window) watchList();
}
