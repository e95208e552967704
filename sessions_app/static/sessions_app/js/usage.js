// A run's token usage as its events report it: each kind of token added up turn by
// turn, and the cost added exactly (the API sends costs as decimal strings, which
// floating point would round), until run.completed brings the run's own totals.
import { formatCost } from "./format.js";

export const USAGE_KINDS = ["input_tokens", "output_tokens", "cached_input_tokens", "cache_write_tokens", "reasoning_tokens", "total_tokens"];

// goaai keeps costs to ten decimal places.
const PLACES = 10;
const SCALE = 10n ** BigInt(PLACES);

function toUnits(text) {
  const match = /^(-?)(\d*)(?:\.(\d*))?$/.exec(String(text).trim());
  if (!match) return null;
  const whole = BigInt(match[2] || "0");
  const fraction = BigInt(((match[3] || "") + "0".repeat(PLACES)).slice(0, PLACES));
  const units = whole * SCALE + fraction;
  return match[1] ? -units : units;
}

function fromUnits(units) {
  const sign = units < 0n ? "-" : "";
  const size = units < 0n ? -units : units;
  const fraction = (size % SCALE).toString().padStart(PLACES, "0").replace(/0+$/, "");
  return `${sign}${size / SCALE}${fraction ? `.${fraction}` : ""}`;
}

/** The sum of two costs as decimal strings; null (unknown) stays null only when both are. */
export function addCost(a, b) {
  if (a === null || a === undefined) return b === null || b === undefined ? null : fromUnits(toUnits(b) ?? 0n);
  if (b === null || b === undefined) return a;
  return fromUnits((toUnits(a) ?? 0n) + (toUnits(b) ?? 0n));
}

/** Nothing used yet: the cost is unknown until a turn with a price is recorded. */
export function emptyUsage() {
  return { input_tokens: 0, output_tokens: 0, cached_input_tokens: 0, cache_write_tokens: 0, reasoning_tokens: 0, total_tokens: 0, cost: null, unpriced_turns: 0, estimated: false };
}

/** Adds one turn's usage event to a run's usage. */
export function addTurnUsage(usage, data) {
  for (const kind of USAGE_KINDS) usage[kind] += Number(data[kind]) || 0;
  if (data.cost === null || data.cost === undefined) usage.unpriced_turns += 1;
  else usage.cost = addCost(usage.cost, data.cost);
  // A turn cut short (stopped, failed) before the provider reported its usage.
  if (data.estimated) usage.estimated = true;
}

const count = (n) => Number(n || 0).toLocaleString();

/** "1,234 tokens (1,000 in · 200 cached · 34 out) · $0.0123", and what the line
 * leaves out, for its title. */
export function usageLine(usage) {
  if (!usage.total_tokens) return { text: "", title: "" };
  const parts = [`${count(usage.input_tokens)} in`];
  if (usage.cached_input_tokens) parts.push(`${count(usage.cached_input_tokens)} cached`);
  parts.push(`${count(usage.output_tokens)} out`);
  let text = `${count(usage.total_tokens)} tokens (${parts.join(" · ")})`;
  const cost = usage.cost === null || usage.cost === undefined ? "" : formatCost(usage.cost);
  if (cost) text += ` · ${cost}`;
  if (usage.estimated) text += " · estimated";
  const title = [
    `${count(usage.input_tokens)} input tokens at the full price`,
    `${count(usage.cached_input_tokens)} read from the prompt cache`,
    `${count(usage.cache_write_tokens)} written to the prompt cache`,
    `${count(usage.output_tokens)} output tokens, ${count(usage.reasoning_tokens)} of them reasoning`,
    cost ? `cost ${cost} (US dollars)` : "cost unknown: the model has no price",
  ];
  if (cost && usage.unpriced_turns) title.push(`${usage.unpriced_turns} turn(s) without a price are not counted`);
  if (usage.estimated) title.push("Estimated in part: an answer ended before the provider reported what it used");
  return { text, title: title.join("\n") };
}
