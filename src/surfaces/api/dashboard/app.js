// lachesis dashboard: live refresh from the store's events, log tails, confirmations.
"use strict";
(function () {
  const liveNote = document.getElementById("live");
  // Swap the page's live parts when the store's newest event moves (no reload), at most once a
  // second: a busy store would otherwise have the page rebuilt back to back (the report page
  // reads a thousand rows). Changes that come meanwhile make one refresh when the second is up.
  const GAP_MS = 1000;
  let inFlight = false, again = false, timer = null, seen = null, lastStart = 0;
  function request() {
    if (inFlight) { again = true; return; }
    if (timer !== null) return;
    const wait = lastStart + GAP_MS - Date.now();
    if (wait <= 0) { refresh(); return; }
    timer = setTimeout(() => { timer = null; refresh(); }, wait);
  }
  async function refresh() {
    inFlight = true;
    lastStart = Date.now();
    try {
      const answer = await fetch(location.href, { credentials: "same-origin" });
      if (answer.ok) {
        const doc = new DOMParser().parseFromString(await answer.text(), "text/html");
        for (const part of document.querySelectorAll(".live[id]")) {
          const fresh = doc.getElementById(part.id);
          if (fresh) part.innerHTML = fresh.innerHTML;
        }
        document.body.dataset.refreshed = String(Date.now());
      }
    } catch (e) { /* the next change retries */ }
    inFlight = false;
    if (again) { again = false; request(); }
  }
  // Streams stay open while a page sits in the back-forward cache, and a browser keeps only
  // six connections per host: close them when the page is left, reopen when it comes back.
  const streams = [];
  window.addEventListener("pagehide", () => { for (const s of streams) s.close(); });
  window.addEventListener("pageshow", (e) => { if (e.persisted) location.reload(); });
  if (document.body.dataset.live === "true") {
    const changes = new EventSource("/ui/changes");
    streams.push(changes);
    changes.addEventListener("open", () => { if (liveNote) liveNote.textContent = "live"; });
    changes.addEventListener("error", () => { if (liveNote) liveNote.textContent = "reconnecting…"; });
    changes.addEventListener("change", (e) => {
      if (seen !== null && seen !== e.data) request();
      seen = e.data;
    });
  }
  // Log tail: one stream at a time, for the chosen stage's tab.
  const log = document.getElementById("log");
  let tail = null;
  function follow(tab) {
    for (const t of document.querySelectorAll(".tab")) t.classList.toggle("active", t === tab);
    if (tail) tail.close();
    log.textContent = "";
    tail = new EventSource(tab.dataset.log);
    streams.push(tail);
    tail.onmessage = (e) => {
      const atBottom = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
      log.textContent += e.data + "\n";
      if (atBottom) log.scrollTop = log.scrollHeight;
    };
  }
  if (log) {
    for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => follow(tab));
    const first = document.querySelector(".tab.active") || document.querySelector(".tab");
    if (first) follow(first);
  }
  // Actions ask before they post.
  document.addEventListener("submit", (e) => {
    const message = e.target.dataset && e.target.dataset.confirm;
    if (message && !window.confirm(message)) e.preventDefault();
  });
})();
