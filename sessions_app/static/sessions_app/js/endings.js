// How the chat tells a run's ending: who or what stopped it (the `stopped_by` of its
// end event), in the reader's words.
import { config } from "./state.js";

/** "Stopped by you", "Stopped by an operator (maria)", "Replaced by your next
 * message", "Stopped by policy (max_turns)"; "" when nothing is known of it. */
export function stopText(stoppedBy) {
  if (!stoppedBy || !stoppedBy.kind) return "";
  // The reader is the chat's own user (the one the run answers), or staff reading it.
  const own = config.user.id === config.session.owner.id;
  const user = stoppedBy.user;
  switch (stoppedBy.kind) {
    case "user":
      return own ? "Stopped by you" : `Stopped by ${user || config.session.owner.username}`;
    case "operator":
      return user ? `Stopped by an operator (${user})` : "Stopped by an operator";
    case "superseded":
      return own ? "Replaced by your next message" : "Replaced by the next message";
    case "policy":
      return stoppedBy.rule ? `Stopped by policy (${stoppedBy.rule})` : "Stopped by policy";
    default:
      return "";
  }
}
