// The memory drawer: what the agent remembers for this chat and for its owner, who or
// which run wrote each entry, with edit (a version check against lost updates) and
// delete. It reloads shortly after a run stores or forgets something.
import { api, errorText } from "./api.js";
import { confirmDialog } from "./dialogs.js";
import { $, announce, el, uid } from "./dom.js";
import { formatTime } from "./format.js";
import { config, state, who } from "./state.js";

const SESSION = config.session.id;
const drawer = $("#memory-drawer");
const memoryToggle = $('[data-testid="memory-toggle"]');
let refreshTimer = null;
let opener = null;

/** Reloads the drawer a moment later, once however many events ask for it. */
export function refreshMemorySoon() {
  if (!state.caughtUp) return;
  clearTimeout(refreshTimer);
  refreshTimer = setTimeout(loadMemory, 250);
}

export async function loadMemory() {
  const [mine, users] = await Promise.all([
    api(`memory/?session=${SESSION}&page_size=200`),
    api("memory/?scope=user&page_size=200"),
  ]);
  const errorBox = $('[data-role="memory-error"]', drawer);
  if (!mine.ok || !users.ok) {
    errorBox.textContent = errorText(mine.ok ? users : mine, "Memory could not be loaded.");
    errorBox.hidden = false;
    return;
  }
  errorBox.hidden = true;
  const sessionEntries = mine.data.results.filter((e) => e.scope === "session");
  // Staff see every user's entries through the API: keep this chat's owner's.
  const userEntries = users.data.results.filter((e) => e.user === config.session.owner.id);
  renderList($('[data-scope="session"]', drawer), sessionEntries, "Nothing remembered for this chat yet.");
  renderList($('[data-scope="user"]', drawer), userEntries, "Nothing remembered across chats yet.");
  const count = sessionEntries.length + userEntries.length;
  $('[data-role="memory-count"]').textContent = count ? String(count) : "";
}

function renderList(listEl, entries, emptyText) {
  // An entry being edited is kept as it is: a refresh must not throw away what the
  // user typed (a save then meets the newer version and says so).
  const editing = new Map(Array.from(listEl.querySelectorAll(".memory-entry.is-editing"), (li) => [li.dataset.entryId, li]));
  // Moving an element takes the focus off it: the field being typed in gets it back,
  // with its caret where it was.
  const focused = listEl.contains(document.activeElement) ? document.activeElement : null;
  const caret = focused && "selectionStart" in focused ? [focused.selectionStart, focused.selectionEnd] : null;
  listEl.replaceChildren(...entries.map((entry) => editing.get(entry.id) || entryItem(entry)));
  if (!entries.length) listEl.append(el("li", { class: "muted memory-empty" }, emptyText));
  if (focused && focused.isConnected && document.activeElement !== focused) {
    focused.focus({ preventScroll: true });
    if (caret) focused.setSelectionRange(...caret);
  }
}

function writer(entry) {
  const by = entry.written_by || {};
  if (by.kind === "user") return [who(by.user)];
  if (by.kind === "run" && by.run) {
    const here = state.runs.has(by.run);
    return ["a run ", here ? el("a", { href: `#run-${by.run}` }, "in this chat") : el("span", { class: "mono", title: by.run }, `(${by.run.slice(0, 8)})`)];
  }
  return [by.kind || "the system"];
}

function display(value) {
  return typeof value === "string" ? value : JSON.stringify(value);
}

/** An entry's value, version and who wrote it when, as the server has them. */
function showDetails(parts, entry) {
  parts.value.textContent = display(entry.value);
  parts.version.textContent = ` v${entry.version}`;
  parts.meta.replaceChildren("Written by ", ...writer(entry), " · ", el("time", { datetime: entry.updated_at }, formatTime(entry.updated_at)));
}

function entryItem(entry) {
  const valueEl = el("div", { class: "memory-value", "data-testid": "memory-value" });
  const parts = {
    value: valueEl,
    version: el("span", { class: "muted", "data-testid": "memory-version" }),
    meta: el("p", { class: "memory-meta muted", "data-testid": "memory-meta" }),
  };
  showDetails(parts, entry);
  const li = el(
    "li",
    { class: "memory-entry", dataset: { entryId: entry.id, key: entry.key }, "data-testid": "memory-entry" },
    el("div", { class: "memory-head" }, el("span", { class: "memory-key", "data-testid": "memory-key" }, entry.key), parts.version),
    valueEl,
    parts.meta,
  );
  const editId = uid("mem");
  const textarea = el("textarea", { id: editId, rows: "2", "data-testid": "memory-edit-input" });
  textarea.value = display(entry.value);
  const message = el("p", { class: "memory-message", role: "status", "data-testid": "memory-message" });
  const form = el(
    "form",
    { class: "memory-form", hidden: true },
    el("label", { for: editId, class: "sr-only" }, `New value of ${entry.key}`),
    textarea,
    el("div", { class: "form-actions" }, el("button", { type: "button", class: "button button-small", dataset: { act: "cancel" } }, "Cancel"), el("button", { type: "submit", class: "button button-primary button-small", "data-testid": "memory-save" }, "Save")),
    message,
  );
  const edit = el("button", { type: "button", class: "button button-small button-ghost", "data-testid": "memory-edit", "aria-label": `Edit ${entry.key}` }, "Edit");
  const remove = el("button", { type: "button", class: "button button-small button-ghost danger", "data-testid": "memory-delete", "aria-label": `Delete ${entry.key}` }, "Delete");
  edit.hidden = !config.may.memory;
  remove.hidden = !config.may.forget;
  const actions = el("div", { class: "memory-actions" }, edit, remove);
  li.append(actions, form);
  let version = entry.version;
  const openForm = (open) => {
    form.hidden = !open;
    actions.hidden = open;
    li.classList.toggle("is-editing", open);
    if (open) textarea.focus();
  };
  edit.addEventListener("click", () => openForm(true));
  form.querySelector('[data-act="cancel"]').addEventListener("click", () => {
    openForm(false);
    edit.focus();
  });
  // Someone changed the entry meanwhile: its details are read again, so that what
  // the drawer shows (value, version, writer, time) is what a save would replace.
  const showConflict = async (result) => {
    const fresh = await api(`memory/${entry.id}/`);
    const current = fresh.ok ? fresh.data : result.data && result.data.current;
    if (!current) {
      message.textContent = "It was deleted meanwhile.";
      loadMemory();
      return;
    }
    version = current.version;
    Object.assign(entry, current);
    showDetails(parts, current);
    message.textContent = `It changed meanwhile: now “${display(current.value)}” (version ${current.version}). Save again to replace it with yours.`;
  };
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!textarea.value.trim()) {
      // An empty memory remembers nothing: forgetting is what Delete is for.
      message.textContent = "Type a value to save. To make the agent forget this, use Delete.";
      textarea.focus();
      return;
    }
    let value = textarea.value;
    if (typeof entry.value !== "string") {
      try {
        value = JSON.parse(textarea.value);
      } catch {
        value = textarea.value; // not JSON: keep it as text
      }
    }
    const save = form.querySelector('[type="submit"]');
    save.disabled = true;
    message.textContent = "Saving…";
    const result = await api(`memory/${entry.id}/`, { method: "PATCH", body: { value, version } });
    save.disabled = false;
    if (result.ok) {
      message.textContent = "";
      openForm(false);
      loadMemory();
    } else if (result.status === 409) {
      await showConflict(result);
    } else {
      message.textContent = errorText(result, "It could not be saved.");
    }
  });
  remove.addEventListener("click", async () => {
    const ok = await confirmDialog(`The agent will no longer remember “${entry.key}”.`, { title: "Delete this memory?", ok: "Delete" });
    if (!ok) return;
    const result = await api(`memory/${entry.id}/`, { method: "DELETE" });
    if (result.ok || result.status === 404) {
      li.remove();
      announce(`Deleted ${entry.key}`);
      loadMemory();
    } else {
      window.alert(errorText(result, "It could not be deleted."));
    }
  });
  return li;
}

/** Opens or closes the drawer (`force`: true or false; otherwise it flips). */
export function toggleMemory(force) {
  const open = force ?? drawer.hidden;
  drawer.hidden = !open;
  memoryToggle.setAttribute("aria-expanded", String(open));
  document.body.classList.toggle("memory-open", open);
  if (open) {
    opener = document.activeElement;
    loadMemory();
    $("#memory-title").setAttribute("tabindex", "-1");
    $("#memory-title").focus();
  } else if (opener instanceof HTMLElement) {
    opener.focus();
  }
}

export function startDrawer() {
  for (const button of document.querySelectorAll('[data-action="toggle-memory"]')) button.addEventListener("click", () => toggleMemory());
  $('[data-action="refresh-memory"]').addEventListener("click", () => loadMemory());
  drawer.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && !event.target.closest(".memory-form")) {
      event.stopPropagation();
      toggleMemory(false);
    }
  });
}
