// Copying text, and the copy buttons of answers and JSON blocks.
import { el } from "./dom.js";

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
