// The chat's header: its title (rename), its status badge, End chat and Delete chat.
import { api, errorText } from "./api.js";
import { confirmDialog } from "./dialogs.js";
import { $, announce } from "./dom.js";
import { config, state, stateChanged } from "./state.js";

const SESSION = config.session.id;
const renameForm = $(".rename-form");
const renameInput = $("#rename-input");

export function setTitle(title) {
  config.session.title = title;
  $("#chat-title").textContent = title || "Untitled chat";
  document.title = `${title || "Chat"} · goaai`;
  const item = document.querySelector(`.session-item[data-session-id="${SESSION}"] [data-role="title"]`);
  if (item && title) item.textContent = title;
}

export function setSessionStatus(status) {
  state.sessionStatus = status;
  const badge = $("#session-status");
  badge.textContent = status;
  badge.className = `badge badge-${status}`;
  $('[data-action="end-session"]').hidden = status === "ended" || !config.may.end;
  stateChanged();
}

/** An untitled chat takes its first message as its title (searchable in the list). */
export async function nameAfter(text) {
  const title = text.replace(/\s+/g, " ").trim().slice(0, 80);
  config.session.title = title; // at most once, even if the request fails
  const result = await api(`sessions/${SESSION}/`, { method: "PATCH", body: { title } });
  if (result.ok) setTitle(result.data.title);
}

function closeRename() {
  renameForm.hidden = true;
  $(".title-row").hidden = false;
  $('[data-action="rename"]').focus();
}

export function startHeader() {
  $('[data-action="rename"]').addEventListener("click", () => {
    renameInput.value = config.session.title || "";
    $(".title-row").hidden = true;
    renameForm.hidden = false;
    renameInput.focus();
    renameInput.select();
  });
  $('[data-action="rename-cancel"]').addEventListener("click", closeRename);
  renameInput.addEventListener("keydown", (event) => {
    if (event.key === "Escape") {
      event.preventDefault();
      event.stopPropagation();
      closeRename();
    }
  });
  renameForm.addEventListener("submit", async (event) => {
    event.preventDefault();
    const title = renameInput.value.trim();
    const result = await api(`sessions/${SESSION}/`, { method: "PATCH", body: { title } });
    if (result.ok) {
      setTitle(result.data.title);
      closeRename();
      announce("Renamed");
    } else {
      window.alert(errorText(result, "The chat could not be renamed."));
    }
  });

  $('[data-action="end-session"]').addEventListener("click", async () => {
    const ok = await confirmDialog("Ending the chat stops anything still running. You can read it and export it afterwards, but not add messages.", { title: "End this chat?", ok: "End chat" });
    if (!ok) return;
    const result = await api(`sessions/${SESSION}/end/`, { method: "POST", body: {} });
    if (result.ok) setSessionStatus("ended");
    else window.alert(errorText(result, "The chat could not be ended."));
  });

  $('[data-action="delete-this-session"]')?.addEventListener("click", async () => {
    const ok = await confirmDialog("This chat and everything in it (runs, tool calls, what the agent remembers for it) will be deleted. This cannot be undone.", { title: "Delete this chat?", ok: "Delete" });
    if (!ok) return;
    const result = await api(`sessions/${SESSION}/`, { method: "DELETE" });
    if (result.ok || result.status === 404) window.location.href = config.urls.list;
    else window.alert(errorText(result, "The chat could not be deleted."));
  });
}
