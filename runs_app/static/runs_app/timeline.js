/* The admin's run timeline: expand rows, load their payloads on demand, copy values.
   Plain JavaScript, no dependencies. Text from the server is set with textContent,
   never parsed as HTML. */
(function () {
  "use strict";

  function fetchJSON(url) {
    return fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) { throw new Error(response.status + " " + response.statusText); }
        return response.json();
      });
  }

  function pretty(value) {
    return typeof value === "string" ? value : JSON.stringify(value, null, 2);
  }

  function flash(button, text) {
    const before = button.dataset.label || button.textContent;
    button.dataset.label = before;
    button.textContent = text;
    window.setTimeout(function () { button.textContent = before; }, 1500);
  }

  function writeClipboard(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text);
    }
    // Plain HTTP: the clipboard API is unavailable, the old way still works.
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    const ok = document.execCommand("copy");
    document.body.removeChild(area);
    return ok ? Promise.resolve() : Promise.reject(new Error("copy refused"));
  }

  function copy(button) {
    let text;
    if (button.dataset.copyUrl) {
      text = fetchJSON(button.dataset.copyUrl).then(pretty);
    } else if (button.dataset.copyTarget) {
      const target = document.getElementById(button.dataset.copyTarget);
      text = Promise.resolve(target ? target.textContent : "");
    } else {
      text = Promise.resolve(button.dataset.copy || "");
    }
    text.then(writeClipboard)
      .then(function () { flash(button, "Copied"); })
      .catch(function () { flash(button, "Copy failed"); });
  }

  function element(tag, className, text) {
    const node = document.createElement(tag);
    if (className) { node.className = className; }
    if (text !== undefined) { node.textContent = text; }
    return node;
  }

  function renderMessages(container, messages) {
    container.textContent = "";
    if (!Array.isArray(messages) || messages.length === 0) {
      container.appendChild(element("p", "tl-muted", "No messages recorded."));
      return;
    }
    container.appendChild(element("h5", "", "Messages sent to the model (" + messages.length + ")"));
    messages.forEach(function (message, index) {
      const role = (message && message.role) || "?";
      const content = message && typeof message.content === "string" ? message.content : pretty(message);
      const extra = [];
      if (message && message.name) { extra.push("name " + message.name); }
      if (message && message.tool_call_id) { extra.push("answers " + message.tool_call_id); }
      let box;
      let head;
      if (role === "system") {
        // The system prompt is long and the same in every turn: folded by default.
        box = element("details", "tl-message tl-message-system");
        head = element("summary", "tl-message-role", "system prompt (" + content.length + " characters)");
      } else {
        box = element("div", "tl-message tl-message-" + role);
        head = element("div", "tl-message-role", role + (extra.length ? " · " + extra.join(" · ") : ""));
      }
      box.appendChild(head);
      const pre = element("pre", "tl-pre", content);
      pre.id = container.id + "-m" + index;
      const copyButton = element("button", "tl-copy", "Copy");
      copyButton.type = "button";
      copyButton.dataset.copyTarget = pre.id;
      box.appendChild(copyButton);
      box.appendChild(pre);
      if (message && Array.isArray(message.tool_calls) && message.tool_calls.length) {
        box.appendChild(element("div", "tl-message-role", "tool calls asked for"));
        box.appendChild(element("pre", "tl-pre", pretty(message.tool_calls)));
      }
      container.appendChild(box);
    });
  }

  let lazyCount = 0;

  function loadLazy(scope) {
    scope.querySelectorAll("[data-lazy-url]").forEach(function (container) {
      if (container.dataset.state === "loading" || container.dataset.state === "done") { return; }
      if (!container.id) { lazyCount += 1; container.id = "tl-lazy-" + lazyCount; }
      container.dataset.state = "loading";
      container.setAttribute("aria-busy", "true");
      fetchJSON(container.dataset.lazyUrl)
        .then(function (value) {
          if (container.dataset.render === "messages") {
            renderMessages(container, value);
          } else {
            container.textContent = "";
            container.appendChild(element("pre", "tl-pre", pretty(value)));
          }
          container.dataset.state = "done";
        })
        .catch(function (error) {
          container.dataset.state = "error";
          container.textContent = "";
          container.appendChild(element("span", "tl-error", "Could not load: " + error.message + " "));
          const retry = element("button", "tl-retry", "Retry");
          retry.type = "button";
          retry.addEventListener("click", function () { loadLazy(container.parentNode); });
          container.appendChild(retry);
        })
        .finally(function () { container.removeAttribute("aria-busy"); });
    });
  }

  function setExpanded(button, expanded) {
    const target = document.getElementById(button.getAttribute("aria-controls"));
    if (!target) { return; }
    button.setAttribute("aria-expanded", expanded ? "true" : "false");
    target.hidden = !expanded;
    if (expanded) { loadLazy(target); }
  }

  function loadFull(button) {
    const target = document.getElementById(button.dataset.target);
    button.disabled = true;
    fetchJSON(button.dataset.url)
      .then(function (value) {
        if (target) {
          target.textContent = pretty(value);
          // A reply drawn as markdown is drawn again (timeline-markdown.js).
          target.dispatchEvent(new CustomEvent("tl:value-loaded", { bubbles: true }));
        }
        button.remove();
      })
      .catch(function (error) {
        button.disabled = false;
        flash(button, "Failed: " + error.message);
      });
  }

  document.addEventListener("click", function (event) {
    const button = event.target.closest("button");
    if (!button || !button.closest(".tl")) { return; }
    if (button.classList.contains("tl-expand")) {
      setExpanded(button, button.getAttribute("aria-expanded") !== "true");
    } else if (button.classList.contains("tl-copy")) {
      copy(button);
    } else if (button.classList.contains("tl-load-full")) {
      loadFull(button);
    } else if (button.classList.contains("tl-expand-all") || button.classList.contains("tl-collapse-all")) {
      const open = button.classList.contains("tl-expand-all");
      document.querySelectorAll(".tl .tl-expand").forEach(function (b) { setExpanded(b, open); });
    }
  });

  function openFromHash() {
    const match = /^#seq-(\d+)$/.exec(window.location.hash);
    if (!match) { return; }
    const button = document.querySelector('[aria-controls="detail-' + match[1] + '"]');
    if (button) { setExpanded(button, true); }
  }

  window.addEventListener("hashchange", openFromHash);
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", openFromHash);
  } else {
    openFromHash();
  }
})();
