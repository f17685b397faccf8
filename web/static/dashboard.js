// Sluice dashboard: live updates without reloading the page. The server
// renders every fragment (#dash-live); this script only swaps them in, from
// server-sent events (/dashboard/events) or, if those fail, by polling
// (/dashboard?fragment=1). The page works without it: a reload refreshes.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const live = document.getElementById("dash-live");
  if (!live) return;
  const form = document.getElementById("key-search");
  const input = document.getElementById("key-q");
  let source = null; // the EventSource
  let timer = null; // the polling fallback
  let stopped = false; // logged out: no more updates

  // swap replaces the live region's content with a fragment's, keeping the
  // element (and its listeners). Counts the updates in data-updates and
  // notes how the last one came in data-transport (events, polling,
  // navigation).
  function swap(html, transport) {
    const tpl = document.createElement("template");
    tpl.innerHTML = html;
    const fresh = tpl.content.getElementById("dash-live");
    if (!fresh) return false;
    live.replaceChildren(...fresh.childNodes);
    live.dataset.fragment = fresh.dataset.fragment;
    live.dataset.events = fresh.dataset.events;
    live.dataset.updates = String((parseInt(live.dataset.updates || "0", 10) || 0) + 1);
    live.dataset.transport = transport;
    return true;
  }

  function close() {
    if (source) { source.close(); source = null; }
    if (timer) { clearTimeout(timer); timer = null; }
  }

  function stop() {
    stopped = true;
    close();
    live.classList.add("stopped");
    const meta = live.querySelector(".live-meta");
    if (meta) meta.textContent = "Live updates stopped: the session ended. Reload the page to log in again.";
  }

  function connect() {
    close();
    if (stopped || document.hidden) return;
    if (!("EventSource" in window) || !live.dataset.events) { poll(0); return; }
    source = new EventSource(live.dataset.events);
    source.addEventListener("update", (ev) => swap(ev.data, "events"));
    source.onerror = () => {
      // The browser reconnects by itself, unless the stream was refused
      // (for instance after logging out): then poll, which notices.
      if (source && source.readyState === EventSource.CLOSED) {
        source = null;
        poll(2000);
      }
    };
  }

  async function fetchFragment(url, transport) {
    const res = await fetch(url, { headers: { "Accept": "text/html" }, credentials: "same-origin" });
    if (res.status === 401 || res.redirected) { stop(); return false; }
    if (!res.ok) return false;
    return swap(await res.text(), transport);
  }

  function poll(delay) {
    timer = setTimeout(async () => {
      timer = null;
      try { await fetchFragment(live.dataset.fragment, "polling"); } catch (e) { /* unreachable: retry */ }
      if (!stopped && !document.hidden) poll(2000);
    }, delay);
  }

  // The search and the chart span change the view in place: the URL
  // follows (so a reload or a shared link shows the same), the stream
  // restarts for the new view.
  async function navigate(params) {
    const url = new URL(window.location.href);
    for (const [k, v] of Object.entries(params)) {
      if (v) url.searchParams.set(k, v); else url.searchParams.delete(k);
    }
    history.replaceState(null, "", url.pathname + url.search);
    const frag = new URLSearchParams(url.search);
    frag.set("fragment", "1");
    close();
    try { await fetchFragment("/dashboard?" + frag.toString(), "navigation"); } catch (e) { /* keep the old view */ }
    connect();
  }

  if (form && input) {
    form.addEventListener("submit", (ev) => {
      ev.preventDefault();
      navigate({ q: input.value.trim() });
    });
  }
  document.querySelectorAll(".windows a[data-window]").forEach((a) => {
    a.addEventListener("click", (ev) => {
      ev.preventDefault();
      document.querySelectorAll(".windows a").forEach((o) => {
        o.classList.toggle("active", o === a);
        if (o === a) o.setAttribute("aria-current", "true"); else o.removeAttribute("aria-current");
      });
      if (form && form.elements.window) form.elements.window.value = a.dataset.window;
      navigate({ window: a.dataset.window });
    });
  });
  live.addEventListener("click", (ev) => {
    const a = ev.target.closest("a.clear-search");
    if (!a) return;
    ev.preventDefault();
    if (input) input.value = "";
    navigate({ q: "" });
  });

  // No updates for a hidden tab; catch up when it shows again.
  document.addEventListener("visibilitychange", () => {
    if (document.hidden) close(); else if (!stopped) connect();
  });
  connect();
});
