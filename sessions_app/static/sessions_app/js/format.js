// Times and durations as people read them. Times are in the page's time zone (the
// one the server wrote the page's own times in, <meta name="time-zone">) and in the
// server's format: 24-hour HH:MM, dates as "Mar 5, 2026".

/** The page's time zone, or the browser's when the page names none it knows. */
function pageZone() {
  const zone = document.querySelector('meta[name="time-zone"]')?.content;
  try {
    return new Intl.DateTimeFormat("en-US", { timeZone: zone }).resolvedOptions().timeZone;
  } catch {
    return undefined;
  }
}

const ZONE = pageZone();
const CLOCK = new Intl.DateTimeFormat("en-US", { timeZone: ZONE, hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
const DATE = new Intl.DateTimeFormat("en-US", { timeZone: ZONE, month: "short", day: "numeric", year: "numeric" });
// A calendar day in the page's zone, for telling today from other days.
const DAY = new Intl.DateTimeFormat("en-CA", { timeZone: ZONE, year: "numeric", month: "2-digit", day: "2-digit" });

function parse(iso) {
  if (!iso) return null;
  const date = iso instanceof Date ? iso : new Date(iso);
  return Number.isNaN(date.getTime()) ? null : date;
}

/** The time of day, HH:MM (24 hours). */
export function formatClock(iso) {
  const date = parse(iso);
  return date ? CLOCK.format(date) : "";
}

/** The date, as the server writes it ("Mar 5, 2026"). */
export function formatDate(iso) {
  const date = parse(iso);
  return date ? DATE.format(date) : "";
}

/** Whether the moment falls on today, in the page's time zone. */
export function isToday(iso) {
  const date = parse(iso);
  return Boolean(date) && DAY.format(date) === DAY.format(new Date());
}

/** A moment as the page shows it: HH:MM today, "Mar 5, 2026, HH:MM" on another day. */
export function formatTime(iso) {
  const date = parse(iso);
  if (!date) return "";
  return isToday(date) ? formatClock(date) : `${formatDate(date)}, ${formatClock(date)}`;
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
