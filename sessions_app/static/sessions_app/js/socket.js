// The chat's live stream: one WebSocket that asks for every event after the last seq
// the page applied (?after=N), then gets live events and token deltas; the events
// come in frames of several (&batch=1: a step's events in one frame). It pings
// every 25 s, reconnects with backoff, and keeps the banner saying connected,
// reconnecting (attempt n) or offline.
import { $, el } from "./dom.js";

const banner = $("#connection-banner");
const socket = {
  ws: null,
  attempt: 0,
  after: null, // set by a resync frame
  retryTimer: null,
  pingTimer: null,
  pongTimer: null,
  done: false, // a close that must not be retried (signed out, deleted)
  deleted: false, // the server said the chat was deleted
  everConnected: false,
};
let stream = null; // the options given to startSocket

function setBanner(stateName, text, { retry = false } = {}) {
  banner.dataset.state = stateName;
  $('[data-role="text"]', banner).replaceChildren(...(Array.isArray(text) ? text : [text]));
  $('[data-action="reconnect-now"]', banner).hidden = !retry;
}

function connect() {
  clearTimeout(socket.retryTimer);
  if (socket.ws && socket.ws.readyState <= WebSocket.OPEN) return;
  const after = socket.after ?? stream.lastSeen();
  socket.after = null;
  const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
  const ws = new WebSocket(`${scheme}//${window.location.host}${stream.path}?after=${after}&batch=1`);
  socket.ws = ws;
  ws.addEventListener("message", (message) => {
    let frame;
    try {
      frame = JSON.parse(message.data);
    } catch {
      return;
    }
    onFrame(frame);
  });
  ws.addEventListener("close", (event) => onClose(ws, event.code));
}

function onFrame(frame) {
  switch (frame.type) {
    case "events":
      for (const event of frame.events) stream.onEvent(event);
      break;
    case "event":
      stream.onEvent(frame.event);
      break;
    case "delta":
      stream.onDelta(frame);
      break;
    case "caught_up":
      onCaughtUp();
      break;
    case "resync":
      socket.after = Math.min(stream.lastSeen(), frame.after);
      break;
    case "pong":
      clearTimeout(socket.pongTimer);
      // The socket outlived a network blip (browsers may keep it open): say so.
      if (banner.dataset.state !== "connected") {
        socket.attempt = 0;
        banner.classList.remove("is-quiet");
        setBanner("connected", "Connected again. You are up to date.");
      }
      break;
    case "error":
      // The server says why it closes the stream just before it does.
      if (frame.code === "session_deleted") socket.deleted = true;
      else console.warn("goaai stream:", frame.code, frame.detail);
      break;
    default:
      break;
  }
}

function onCaughtUp() {
  socket.attempt = 0;
  const reconnected = socket.everConnected;
  socket.everConnected = true;
  setBanner("connected", reconnected ? "Connected again. You are up to date." : "Connected");
  // The first connection is the normal case: nothing to point out.
  banner.classList.toggle("is-quiet", !reconnected);
  clearInterval(socket.pingTimer);
  socket.pingTimer = setInterval(ping, 25000);
  stream.onCaughtUp();
}

function ping() {
  const ws = socket.ws;
  if (!ws || ws.readyState !== WebSocket.OPEN) return;
  ws.send(JSON.stringify({ type: "ping" }));
  clearTimeout(socket.pongTimer);
  // No answer: the connection is dead without having said so. Start again.
  socket.pongTimer = setTimeout(() => ws.close(), 10000);
}

function onClose(ws, code) {
  if (ws !== socket.ws) return;
  clearInterval(socket.pingTimer);
  clearTimeout(socket.pongTimer);
  socket.ws = null;
  if (code === 4401) {
    socket.done = true;
    setBanner("offline", ["You are signed out. ", el("a", { href: `${stream.loginUrl}?next=${encodeURIComponent(window.location.pathname)}` }, "Sign in again")]);
    return;
  }
  if (code === 4404 || code === 4403 || socket.deleted) {
    // 4404: the chat was deleted (the page showed it, so it existed).
    const why = code === 4403 && !socket.deleted ? "forbidden" : "deleted";
    socket.done = true;
    setBanner("offline", why === "deleted" ? "This chat was deleted." : "This page may not follow this chat.");
    stream.onGone(why);
    return;
  }
  if (code === 4409) {
    // The server says we fell behind: reconnect at once from what we have.
    connect();
    return;
  }
  scheduleReconnect();
}

function scheduleReconnect() {
  if (socket.done) return;
  socket.attempt += 1;
  if (!navigator.onLine) {
    setBanner("offline", "You are offline. The chat reconnects when the network is back.", { retry: true });
    return;
  }
  const delay = Math.min(30000, 500 * 2 ** (socket.attempt - 1)) + Math.random() * 300;
  if (socket.attempt > 5) {
    setBanner("offline", `Connection lost. Trying again in ${Math.round(delay / 1000)} s (attempt ${socket.attempt})…`, { retry: true });
  } else {
    setBanner("reconnecting", `Reconnecting… (attempt ${socket.attempt})`, { retry: socket.attempt > 1 });
  }
  socket.retryTimer = setTimeout(connect, delay);
}

/** Ends the stream for good (the chat was deleted) with `text` in the banner:
 * for when the page learns it otherwise than from the stream (a send got 404). */
export function closeStream(text) {
  socket.done = true;
  clearTimeout(socket.retryTimer);
  clearInterval(socket.pingTimer);
  clearTimeout(socket.pongTimer);
  const ws = socket.ws;
  socket.ws = null;
  if (ws && ws.readyState <= WebSocket.OPEN) ws.close();
  setBanner("offline", text);
  banner.classList.remove("is-quiet");
}

/**
 * Connects and stays connected. `options`: `path` of the stream, `loginUrl`,
 * `lastSeen()` (the highest seq applied), and the callbacks `onEvent(event)`,
 * `onDelta(frame)`, `onCaughtUp()` (after each backlog) and `onGone(why)` (the
 * chat was deleted, "deleted", or may not be followed, "forbidden").
 */
export function startSocket(options) {
  stream = options;
  $('[data-action="reconnect-now"]', banner).addEventListener("click", () => {
    setBanner("reconnecting", `Reconnecting… (attempt ${socket.attempt + 1})`);
    // A socket still open is checked with a ping; a dead one closes and reconnects.
    if (socket.ws && socket.ws.readyState === WebSocket.OPEN) ping();
    else connect();
  });
  window.addEventListener("online", () => {
    if (socket.done) return;
    if (socket.ws) ping();
    else connect();
  });
  window.addEventListener("offline", () => {
    if (!socket.done) setBanner("offline", "You are offline. The chat reconnects when the network is back.", { retry: true });
  });
  document.addEventListener("visibilitychange", () => {
    if (document.visibilityState === "visible" && !socket.ws && !socket.done) connect();
  });
  connect();
}
