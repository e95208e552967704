// The page's time zone. The server writes times in the zone it names in
// <meta name="time-zone"> (the user's preference, else the browser's, else its own);
// this script tells it the browser's zone (the goaai_tz cookie, read by
// sessions_app.timezones) and, on a page that shows times the server wrote, loads the
// page again once when those were written in another zone than the browser's: one
// clock on the page. Times the page's scripts write use the same zone (format.js).

const COOKIE = "goaai_tz";
// IANA names: letters, digits, _ + - and /.
const ZONE_NAME = /^[A-Za-z0-9_+-]+(?:\/[A-Za-z0-9_+-]+)*$/;
const RELOADED = "goaai-tz-reloaded";

function browserZone() {
  try {
    return Intl.DateTimeFormat().resolvedOptions().timeZone || "";
  } catch {
    return "";
  }
}

function cookieZone() {
  const match = document.cookie.match(/(?:^|;\s*)goaai_tz=([^;]*)/);
  return match ? match[1] : "";
}

function rememberZone(zone) {
  const secure = window.location.protocol === "https:" ? "; Secure" : "";
  document.cookie = `${COOKIE}=${zone}; Path=/; Max-Age=${365 * 24 * 3600}; SameSite=Lax${secure}`;
}

/** Loads the page again, once a browser tab, if the server wrote its times in
 * another zone than the one it now knows the browser is in. */
function reloadInBrowserZone(meta, zone) {
  if (meta.dataset.source === "preferences" || meta.content === zone) return;
  if (!meta.hasAttribute("data-server-times") || cookieZone() !== zone) return;
  try {
    if (window.sessionStorage.getItem(RELOADED) === zone) return;
    window.sessionStorage.setItem(RELOADED, zone);
  } catch {
    return; // without storage a loop could not be ruled out
  }
  window.location.reload();
}

function start() {
  const zone = browserZone();
  if (!ZONE_NAME.test(zone)) return;
  if (cookieZone() !== zone) rememberZone(zone);
  const meta = document.querySelector('meta[name="time-zone"]');
  if (meta) reloadInBrowserZone(meta, zone);
}

start();
