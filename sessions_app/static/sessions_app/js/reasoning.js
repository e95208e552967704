// The models' reasoning, shown folded before the answers it led to. Events do not
// carry it (it can be long): the page asks the API for the turns that have some,
// the whole session's once its history is on screen, then a run's as its turns end.
import { api } from "./api.js";
import { showReasoning } from "./render.js";
import { config } from "./state.js";

const PAGE_SIZE = 200;
// A session with more turns with reasoning than this shows the first ones only.
const MAX_PAGES = 10;

async function load(query) {
  const params = new URLSearchParams({ ...query, has_reasoning: "true", page_size: String(PAGE_SIZE) });
  let path = `turns/?${params}`;
  for (let page = 0; path && page < MAX_PAGES; page += 1) {
    const result = await api(path);
    if (!result.ok || !result.data) return;
    for (const turn of result.data.results || []) showReasoning(turn.id, turn.reasoning);
    const next = result.data.next ? new URL(result.data.next, window.location.href) : null;
    path = next ? next.pathname + next.search : "";
  }
}

/** The reasoning of every turn of the session that has some. */
export function loadSessionReasoning() {
  return load({ session: config.session.id });
}

/** The reasoning of a run's turns (after one of them ended). */
export function loadRunReasoning(runId) {
  return load({ run: runId });
}
