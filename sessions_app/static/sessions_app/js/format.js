// Times and durations as people read them.

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

/** A cost in US dollars (an exact decimal string from the API) as people read it:
 * $12.35, $0.0123, $0.00012 (two significant digits below a cent), $0. */
export function formatCost(text) {
  const amount = Number(text);
  if (text === null || text === undefined || text === "" || Number.isNaN(amount)) return "";
  if (amount === 0) return "$0";
  const size = Math.abs(amount);
  let places = 2;
  if (size < 0.01) places = Math.min(20, 1 - Math.floor(Math.log10(size)));
  else if (size < 1) places = 4;
  return `${amount < 0 ? "−" : ""}$${size.toFixed(places)}`;
}
