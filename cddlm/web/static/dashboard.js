/* cddlm dashboard: keeps a page live without reloading it.
 *
 * Every data-poll seconds it asks the page's small JSON endpoint (data-live-url, answering
 * {"version": ...}) whether anything changed; when the version moves (or every few seconds, for
 * logs and heartbeats that change without it) it fetches the page again and swaps each
 * element marked data-live for its fresh copy. The server escapes everything it renders, and this
 * script never builds markup from data: it moves nodes the browser parsed from the server's page.
 */
(function () {
  "use strict";
  var body = document.body;
  var url = body.getAttribute("data-live-url");
  if (!url || !window.fetch || !window.DOMParser) { return; }
  var poll = Math.max(0.2, parseFloat(body.getAttribute("data-poll")) || 0.5) * 1000;
  var REFRESH_ANYWAY = 5000;
  var status = document.getElementById("live-status");
  var version = null, failures = 0, lastRefresh = Date.now(), stopped = false;

  function setStatus(text) {
    if (status && status.textContent !== text) { status.textContent = text; }
  }

  function scrolls(root) {
    return Array.prototype.map.call(root.querySelectorAll("pre, .table-scroll, .picture-scroll"), function (el) {
      return { top: el.scrollTop, left: el.scrollLeft,
               bottom: el.scrollHeight - el.scrollTop - el.clientHeight < 4 };
    });
  }

  function restore(root, saved) {
    Array.prototype.forEach.call(root.querySelectorAll("pre, .table-scroll, .picture-scroll"), function (el, i) {
      var s = saved[i];
      if (!s) { return; }
      el.scrollLeft = s.left;
      el.scrollTop = s.bottom ? el.scrollHeight : s.top;
    });
  }

  function swap(doc) {
    Array.prototype.forEach.call(document.querySelectorAll("[data-live][id]"), function (old) {
      var fresh = doc.getElementById(old.id);
      if (!fresh) { return; }
      var saved = scrolls(old);
      var node = document.importNode(fresh, true);
      old.parentNode.replaceChild(node, old);
      restore(node, saved);
    });
    Array.prototype.forEach.call(document.querySelectorAll("[data-live-text][id]"), function (old) {
      var fresh = doc.getElementById(old.id);
      if (fresh && fresh.textContent !== old.textContent) { old.textContent = fresh.textContent; }
    });
    if (doc.title) { document.title = doc.title; }
  }

  function get(address, accept) {
    return fetch(address, { credentials: "same-origin", cache: "no-store",
                            headers: { "Accept": accept } }).then(function (r) {
      if (r.status === 404) { stopped = true; }
      if (!r.ok) { throw new Error("HTTP " + r.status); }
      return accept === "application/json" ? r.json() : r.text();
    });
  }

  function tick() {
    if (document.hidden) { return schedule(); }
    get(url, "application/json").then(function (data) {
      var changed = version !== null && data.version !== version;
      version = data.version;
      if (changed || Date.now() - lastRefresh > REFRESH_ANYWAY) {
        lastRefresh = Date.now();
        return get(location.href, "text/html").then(function (text) {
          swap(new DOMParser().parseFromString(text, "text/html"));
        });
      }
    }).then(function () {
      failures = 0;
      setStatus("live");
    }, function () {
      failures += 1;
      setStatus(stopped ? "no longer exists" : "reconnecting\u2026");
    }).then(schedule);
  }

  function schedule() {
    if (stopped) { return; }
    // a lost poll or two (a page busy being captured, a portal restarting) costs nothing;
    // only a portal that keeps failing is asked less and less often
    window.setTimeout(tick, failures > 2 ? Math.min(10000, poll * Math.pow(2, failures - 2)) : poll);
  }

  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) { lastRefresh = 0; }
  });
  schedule();
}());
