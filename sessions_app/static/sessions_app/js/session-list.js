// The session list (the list page and the chat page's sidebar): deleting a chat with
// confirmation, and live updates over /ws/sessions/ (new chats, titles, run states).
import { api, errorText } from "./api.js";
import { confirmDialog } from "./dialogs.js";
import { announce, el } from "./dom.js";
import { formatClock } from "./format.js";

// How a run's status reads in a badge (sessions_app.views.RUN_STATUS_LABELS).
const RUN_STATUS_LABELS = {
  pending: "queued",
  running: "running",
  awaiting_input: "needs you",
  completed: "done",
  failed: "failed",
  canceled: "stopped",
  timed_out: "timed out",
};

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

const list = document.getElementById("session-list");
// Runs started by another run (an agent called as a tool), seen on this stream.
const childRuns = new Set();

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

function newItem(sessionId, data, at) {
  const title = data.title || "Untitled chat";
  const now = at ? new Date(at) : new Date();
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
        el("time", { datetime: now.toISOString(), dataset: { role: "activity" } }, formatClock(now)),
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

/** The list of the "Today" group, first in the list (made if there is none). */
function todayItems() {
  let group = list.querySelector(".session-group");
  const firstTitle = group ? group.querySelector(".session-group-title") : null;
  if (!group || !firstTitle || firstTitle.textContent.trim() !== "Today") {
    const id = `group-live-${Date.now()}`;
    group = el("section", { class: "session-group", "aria-labelledby": id }, el("h2", { class: "session-group-title", id }, "Today"), el("ul", { class: "session-items", role: "list" }));
    list.prepend(group);
  }
  return group.querySelector(".session-items");
}

function addItem(sessionId, data, at) {
  if (itemOf(sessionId)) return;
  list.querySelector('[data-testid="empty-list"]')?.remove();
  todayItems().prepend(newItem(sessionId, data, at));
}

/** The chat was just active (a message, an answer): first in the list, as the
 * server orders it (by last activity), with that time. */
function moveToTop(item, at) {
  const time = item.querySelector('[data-role="activity"]');
  const moment = at ? new Date(at) : new Date();
  if (time && !Number.isNaN(moment.getTime())) {
    time.setAttribute("datetime", moment.toISOString());
    time.textContent = formatClock(moment);
  }
  const items = todayItems();
  if (items.firstElementChild === item) return;
  const group = item.closest(".session-group");
  items.prepend(item);
  if (group && !group.querySelector(".session-item")) group.remove();
}

function setRunBadge(item, status) {
  const badge = item.querySelector('[data-role="run-status"]');
  if (!badge) return;
  badge.hidden = false;
  badge.className = `badge badge-run badge-${status}`;
  badge.textContent = RUN_STATUS_LABELS[status] || status;
}

function onListEvent(event) {
  const sessionId = event.session;
  if (!sessionId) return;
  const listData = readListData();
  if (event.type === "session.created") {
    if (listData.live) addItem(sessionId, event.data || {}, event.created_at);
    return;
  }
  const item = itemOf(sessionId);
  if (event.type === "session.deleted") {
    if (item) removeItem(item);
    return;
  }
  if (!item) return;
  // Every event is activity: the chat moves up (on the first page of the whole list).
  if (listData.live) moveToTop(item, event.created_at);
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

/** The list page's <script type="application/json" id="list-data">; the chat
 * page's sidebar has none and always takes new chats. */
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

export function startSessionList() {
  if (!list) return;
  list.addEventListener("click", (event) => {
    const button = event.target instanceof Element ? event.target.closest('[data-action="delete-session"]') : null;
    if (button) deleteSession(button);
  });
  if ("WebSocket" in window) watchList();
}
