// The webhooks settings page: the user's endpoints, their recent deliveries with
// every attempt, and the actions on them, all through /api/v1/webhooks/.
import { api, errorText } from "./api.js";
import { copyButton } from "./clipboard.js";
import { confirmDialog } from "./dialogs.js";
import { $, announce, el } from "./dom.js";
import { formatTime } from "./format.js";
import { startPage } from "./page.js";

const data = JSON.parse($("#webhooks-data").textContent);
const list = $('[data-role="endpoints"]');
const status = $('[data-role="status"]');
const form = $("#webhook-form");
const formError = $('[data-role="form-error"]', form);
const RECENT = 10;

function showSecret(endpoint) {
  const box = $('[data-role="secret"]');
  $('[data-role="secret-value"]', box).textContent = endpoint.secret;
  $('[data-role="secret-copy"]', box).replaceChildren(copyButton(() => endpoint.secret, "Copy secret"));
  box.hidden = false;
  box.scrollIntoView({ block: "nearest" });
}

function attemptLine(attempt) {
  const answer = attempt.response_status ? `HTTP ${attempt.response_status}` : attempt.error || "no answer";
  const manual = attempt.manual ? " (redelivery)" : "";
  return el("li", {}, `#${attempt.number} ${formatTime(attempt.started_at)}: ${answer}, ${attempt.latency_ms} ms${manual}`);
}

function deliveryRow(delivery, reload) {
  const redeliver = el("button", { type: "button", class: "button button-small", "data-testid": "redeliver" }, "Redeliver");
  redeliver.addEventListener("click", async () => {
    redeliver.disabled = true;
    const result = await api(`${data.api}deliveries/${delivery.id}/redeliver/`, { method: "POST" });
    if (!result.ok) {
      redeliver.disabled = false;
      announce(errorText(result));
      return;
    }
    announce("Queued to be sent again.");
    setTimeout(reload, 1500);
  });
  const next = delivery.next_attempt_at ? ` · next ${formatTime(delivery.next_attempt_at)}` : "";
  return el(
    "tr",
    { "data-testid": "delivery" },
    el("td", {}, el("code", {}, delivery.event_type)),
    el("td", {}, el("span", { class: `badge badge-${delivery.status}` }, delivery.status.replace("_", " ")), next),
    el("td", {}, formatTime(delivery.created_at)),
    el("td", {}, delivery.attempts.length ? el("ol", { class: "webhook-attempts" }, delivery.attempts.map(attemptLine)) : "none yet"),
    el("td", {}, redeliver),
  );
}

async function loadDeliveries(endpoint, holder) {
  const result = await api(`${data.api}${endpoint.id}/deliveries/?page_size=${RECENT}`);
  if (!result.ok) {
    holder.replaceChildren(el("p", { class: "form-error" }, errorText(result)));
    return;
  }
  const rows = result.data.results;
  if (!rows.length) {
    holder.replaceChildren(el("p", { class: "muted" }, "Nothing sent yet."));
    return;
  }
  const reload = () => loadDeliveries(endpoint, holder);
  holder.replaceChildren(
    el(
      "table",
      { class: "webhook-deliveries" },
      el("thead", {}, el("tr", {}, ["Event", "Status", "Created", "Attempts", ""].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, rows.map((row) => deliveryRow(row, reload))),
    ),
  );
}

function actionButton(label, testid, onClick, danger = false) {
  const button = el("button", { type: "button", class: `button button-small${danger ? " button-danger" : ""}`, "data-testid": testid }, label);
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      await onClick();
    } finally {
      button.disabled = false;
    }
  });
  return button;
}

function endpointCard(endpoint) {
  const deliveries = el("div", { "data-role": "deliveries" }, el("p", { class: "muted" }, "Loading deliveries…"));
  const state = endpoint.active ? "active" : "ended";
  const actions = el(
    "div",
    { class: "webhook-actions" },
    actionButton("Send test", "test-endpoint", async () => {
      const result = await api(`${data.api}${endpoint.id}/test/`, { method: "POST" });
      announce(result.ok ? "Test message queued." : errorText(result));
      setTimeout(() => loadDeliveries(endpoint, deliveries), 1500);
    }),
    actionButton(endpoint.active ? "Disable" : "Enable", "toggle-endpoint", async () => {
      const result = await api(`${data.api}${endpoint.id}/`, { method: "PATCH", body: { active: !endpoint.active } });
      if (result.ok) await load();
      else announce(errorText(result));
    }),
    actionButton("Rotate secret", "rotate-secret", async () => {
      if (!(await confirmDialog("Messages will be signed with a new secret from now on; the old one stops verifying.", { ok: "Rotate" }))) return;
      const result = await api(`${data.api}${endpoint.id}/rotate-secret/`, { method: "POST" });
      if (result.ok) showSecret(result.data);
      else announce(errorText(result));
    }),
    actionButton(
      "Delete",
      "delete-endpoint",
      async () => {
        if (!(await confirmDialog(`Delete the endpoint ${endpoint.url} and its delivery log?`, { ok: "Delete" }))) return;
        const result = await api(`${data.api}${endpoint.id}/`, { method: "DELETE" });
        if (result.ok) {
          announce("Endpoint deleted.");
          await load();
        } else announce(errorText(result));
      },
      true,
    ),
  );
  const card = el(
    "article",
    { class: "webhook-endpoint", "data-testid": "webhook-endpoint" },
    el(
      "header",
      {},
      el("span", { class: "webhook-url" }, endpoint.url),
      el("span", { class: `badge badge-${state}` }, endpoint.active ? "active" : "disabled"),
    ),
    endpoint.description ? el("p", { class: "muted" }, endpoint.description) : null,
    endpoint.disabled_reason ? el("p", { class: "form-error" }, endpoint.disabled_reason) : null,
    el("p", {}, "Events: ", endpoint.events.map((event) => el("code", {}, `${event} `))),
    actions,
    el("h3", {}, "Recent deliveries"),
    deliveries,
  );
  loadDeliveries(endpoint, deliveries);
  return card;
}

async function load() {
  const result = await api(data.api);
  if (!result.ok) {
    status.textContent = errorText(result);
    return;
  }
  const endpoints = result.data.results;
  status.textContent = endpoints.length ? "" : "No endpoints yet: add one above.";
  list.replaceChildren(...endpoints.map(endpointCard));
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const button = $('button[type="submit"]', form);
  const events = [...form.querySelectorAll('input[name="events"]:checked')].map((box) => box.value);
  button.disabled = true;
  formError.hidden = true;
  const result = await api(data.api, {
    method: "POST",
    body: { url: form.elements.url.value.trim(), description: form.elements.description.value, events },
  });
  button.disabled = false;
  if (!result.ok) {
    formError.textContent = errorText(result, "The endpoint could not be added.");
    formError.hidden = false;
    return;
  }
  form.reset();
  showSecret(result.data);
  announce("Endpoint added.");
  await load();
});

startPage();
load();
