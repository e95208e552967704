// The REST API under /api/v1/, called with the session cookie and its CSRF token.

const API = "/api/v1/";

function csrfToken() {
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
