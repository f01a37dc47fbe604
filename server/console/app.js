// Pigeon console: signs in with a bearer token kept in this closure only,
// reads the live stream (/v1/console/events, server-sent events read with
// fetch so the token travels in a header), and acts through the HTTP API.
"use strict";
(() => {
  const $ = (id) => document.getElementById(id);
  const MAX_ROWS = 500;
  let token = "";          // in memory only
  let principal = "";
  let contractId = "";     // a contract for releasing (publish on the subjects it covers)
  let releasable = new Set();
  let abort = null;        // ends the current stream
  let retry = 0;
  let paused = false;
  let lastRates = null;
  let lastOpen = -1;       // the quarantine's open records at the last state
  let quarantineTimer = null;
  let session = 0;         // counts sign-ins and sign-outs: an answer to an earlier one is dropped
  const decisions = [];    // newest first, at most MAX_ROWS

  // The text and class the page is served with, of every element the
  // server's data writes to outside the tables: a sign-out puts them back.
  const pristine = new Map(["skipped", "subs", "conns", "audit-records", "qopen", "audit-status", "release-result",
    "live-contracts", "live-contracts-shown"].map((id) => [id, { text: $(id).textContent, cls: $(id).className }]));

  // Theme: the system's unless the user picks one (not stored).
  $("theme").addEventListener("click", () => {
    const root = document.documentElement;
    const dark = root.dataset.theme ? root.dataset.theme === "dark" : matchMedia("(prefers-color-scheme: dark)").matches;
    root.dataset.theme = dark ? "light" : "dark";
  });

  // shown writes the characters a reader cannot see, or that reorder the
  // text around them, as \u{XXXX}: controls, format characters (bidi
  // overrides and isolates, zero-width characters), line and paragraph
  // separators, surrogates, private-use and unassigned code points, and
  // the blank Hangul fillers. Principal ids, message ids and reasons come
  // from identity providers and publishers: a principal named U+202E
  // "nimda" must not read as "admin".
  const hidden = /[\p{Cc}\p{Cf}\p{Zl}\p{Zp}\p{Cs}\p{Co}\p{Cn}\u115F\u1160\u3164\uFFA0]/gu;
  function shown(v) {
    return String(v).replace(hidden, (ch) => "\\u{" + ch.codePointAt(0).toString(16).toUpperCase().padStart(4, "0") + "}");
  }

  // Local is text the browser wrote (a date in the reader's locale, which
  // may hold bidi marks): a cell shows it as it is.
  class Local { constructor(text) { this.text = text; } }
  const local = (text) => new Local(text);

  function status(text, cls) {
    const c = $("conn");
    c.textContent = text;
    c.className = "conn " + (cls || "");
  }

  // fresh settles as p does while the session p began in lasts; after a
  // sign-out (or another sign-in) it never settles, so that an answer
  // arriving late writes nothing of the last session into the page.
  function fresh(p) {
    const s = session;
    const never = new Promise(() => {});
    return p.then((v) => (s === session ? v : never), (e) => (s === session ? Promise.reject(e) : never));
  }

  function api(method, path, body, headers) {
    const h = Object.assign({ Authorization: "Bearer " + token }, headers || {});
    if (body !== undefined) h["Content-Type"] = "application/json";
    return fresh(fetch(path, { method, headers: h, body: body === undefined ? undefined : JSON.stringify(body), cache: "no-store" })
      .then(async (r) => {
        let j = null;
        try { j = await r.json(); } catch (e) { /* not JSON */ }
        return { status: r.status, ok: r.ok, body: j };
      }));
  }

  function errorText(res) {
    const e = res.body && res.body.error;
    return e ? shown(e.code + ": " + e.message) : "HTTP " + res.status;
  }

  // Sign in and out.
  $("signin-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const t = $("token").value.trim();
    $("token").value = "";
    if (!t) return;
    session++;
    token = t;
    $("signin-error").textContent = "";
    connect(true);
  });
  $("signout").addEventListener("click", () => signOut(""));
  // Leaving the page signs out: a browser keeps a page it leaves, script
  // state and all, in its back/forward cache, and Back would bring the
  // console back signed in, token and data, to whoever presses it.
  addEventListener("pagehide", () => {
    $("token").value = "";
    if (token) signOut("You left the page, which signed you out.");
  });

  // signOut forgets the token and everything the server sent: the page is
  // as it was served, but for the message.
  function signOut(message) {
    session++;
    token = ""; principal = ""; contractId = ""; releasable = new Set();
    if (abort) abort.abort();
    abort = null;
    decisions.length = 0;
    lastRates = null;
    lastOpen = -1;
    clearTimeout(quarantineTimer);
    quarantineTimer = null;
    for (const id of ["decisions", "rates", "groups", "held", "quarantine", "contracts", "negotiated"]) clear(id);
    for (const [id, p] of pristine) { $(id).textContent = p.text; $(id).className = p.cls; }
    paused = false;
    $("pause").setAttribute("aria-pressed", "false");
    $("pause").textContent = "Pause";
    $("filter").value = "";
    $("outcome").value = "";
    $("verify").disabled = false;
    $("app").hidden = true;
    $("signin").hidden = false;
    $("signout").hidden = true;
    $("who").textContent = "";
    $("signin-error").textContent = message;
    status("signed out");
  }

  // The live stream.
  async function connect(first) {
    if (abort) abort.abort();
    const ctl = new AbortController();
    abort = ctl;
    status(first ? "connecting…" : "reconnecting…");
    let res;
    try {
      res = await fetch("/v1/console/events", { headers: { Authorization: "Bearer " + token }, signal: ctl.signal, cache: "no-store" });
    } catch (e) {
      return reconnect(ctl);
    }
    if (res.status === 401) return signOut("The token was refused: it is unknown or has expired. No data is shown.");
    if (res.status === 403) return signOut("This token's principal may not use the console: it needs the auditor role. No data is shown.");
    if (!res.ok) { // the server restarting, or 429: this principal holds the most streams it may
      let body = null;
      try { body = await res.json(); } catch (e) { /* not JSON */ }
      return reconnect(ctl, errorText({ status: res.status, body }));
    }
    retry = 0;
    status("live", "live");
    try {
      const reader = res.body.getReader();
      const dec = new TextDecoder();
      let buf = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += dec.decode(value, { stream: true });
        let i;
        while ((i = buf.indexOf("\n\n")) >= 0) {
          if (abort !== ctl) return; // signed out, or another stream took over
          const chunk = buf.slice(0, i);
          buf = buf.slice(i + 2);
          let event = "message", data = "";
          for (const line of chunk.split("\n")) {
            if (line.startsWith("event: ")) event = line.slice(7);
            else if (line.startsWith("data: ")) data += line.slice(6);
          }
          handle(event, JSON.parse(data));
        }
      }
    } catch (e) { /* the stream broke */ }
    reconnect(ctl);
  }

  // reconnect retries after a pause that grows to 5 s, while signed in
  // and this stream is still the current one. The pause is drawn at random
  // between half of that and all of it: consoles cut off together (a
  // server restart) do not all come back in the same instant.
  function reconnect(ctl, why) {
    if (!token || abort !== ctl || ctl.signal.aborted) return;
    status("disconnected" + (why ? " (" + why + ")" : "") + ": reconnecting…", "down");
    retry = Math.min(retry + 1, 5);
    const pause = retry * 1000 * (0.5 + Math.random() / 2);
    setTimeout(() => { if (token && abort === ctl) connect(false); }, pause);
  }

  function handle(event, d) {
    switch (event) {
      case "hello": return hello(d);
      case "decisions": return addDecisions(d);
      case "rates": return rates(d);
      case "state": return state(d);
      case "end": return signOut("The server ended the session: " + shown((d.error && d.error.message) || "the token no longer admits it") + ". No data is shown.");
    }
  }

  async function hello(d) {
    const firstTime = principal === "";
    principal = d.principal;
    $("who").textContent = shown(principal + " (" + (d.roles || []).join(", ") + ")");
    $("signin").hidden = true;
    $("app").hidden = false;
    $("signout").hidden = false;
    if (!d.feed) $("skipped").textContent = "(no live feed configured on this server)";
    await loadContracts();
    if (firstTime || !contractId) await negotiate();
    loadQuarantine();
  }

  // negotiate asks for a contract over every subject: those it grants
  // publish on are the ones this principal may release.
  async function negotiate() {
    const names = [...document.querySelectorAll("#contracts tbody tr")].map((tr) => tr.dataset.subject);
    releasable = new Set();
    contractId = "";
    if (!names.length) return;
    const res = await api("POST", "/v1/contracts", { subjects: names });
    if (!res.ok) return;
    contractId = res.body.contract.id;
    for (const s of res.body.contract.subjects || []) {
      if ((s.operations || []).includes("publish")) releasable.add(s.name);
    }
  }

  async function loadContracts() {
    const res = await fresh(fetch("/v1/subjects", { cache: "no-store" }).then((r) => r.json()));
    const rows = (res.subjects || []).map((s) => {
      const tr = row([s.name, s.mode, s.classification || "", (s.regions || []).join(", "), (s.intents || []).join(", ")]);
      tr.dataset.subject = s.name;
      return tr;
    });
    fill("contracts", rows);
  }

  function matches(d) {
    const f = $("filter").value.trim().toLowerCase();
    const o = $("outcome").value;
    if (o && d.outcome !== o) return false;
    if (!f) return true;
    return [d.subject, d.principal, d.code, d.gate].some((v) => (v || "").toLowerCase().includes(f));
  }

  function addDecisions(d) {
    for (const x of d.decisions || []) decisions.unshift(x);
    decisions.length = Math.min(decisions.length, MAX_ROWS);
    if (d.skipped) $("skipped").textContent = "(" + d.skipped + " more not shown: sampled under load)";
    if (!paused) renderDecisions();
    if ((d.decisions || []).some((x) => x.outcome === "quarantine")) scheduleQuarantine();
  }

  function renderDecisions() {
    const rows = decisions.filter(matches).map((x) => {
      const tr = row([local(new Date(x.time).toLocaleTimeString()), x.subject, x.principal, x.outcome, x.code, x.gate || ""]);
      tr.children[3].className = "o-" + x.outcome;
      tr.dataset.outcome = x.outcome;
      tr.dataset.subject = x.subject;
      return tr;
    });
    fill("decisions", rows);
  }
  $("filter").addEventListener("input", renderDecisions);
  $("outcome").addEventListener("change", renderDecisions);
  $("pause").addEventListener("click", () => {
    paused = !paused;
    $("pause").setAttribute("aria-pressed", String(paused));
    $("pause").textContent = paused ? "Resume" : "Pause";
    if (!paused) renderDecisions();
  });

  // The counts are kept by subject name in a Map, never in a plain
  // object: a subject named "constructor", "toString" or "__proto__" would
  // find Object.prototype's member there.
  function rates(d) {
    const now = Date.parse(d.time);
    const counts = new Map(Object.entries(d.subjects || {}));
    const names = [...counts.keys()].sort();
    const rows = names.map((n) => {
      const s = counts.get(n);
      let per = "";
      if (lastRates && lastRates.subjects.has(n)) {
        const p = lastRates.subjects.get(n);
        const secs = (now - lastRates.at) / 1000;
        const delta = (s.accepted + s.denied + s.quarantined) - (p.accepted + p.denied + p.quarantined);
        if (secs > 0) per = (delta / secs).toFixed(1);
      }
      const tr = row([n, s.accepted, s.denied, s.quarantined, per]);
      tr.dataset.subject = n;
      return tr;
    });
    lastRates = { at: now, subjects: counts };
    fill("rates", rows);
  }

  function state(d) {
    fill("groups", (d.groups || []).map((g) => row([g.subject, g.group, g.lag, g.inFlight])));
    fill("held", (d.subjects || []).map((h) => row([h.notInCatalog ? h.subject + " (not in catalog)" : h.subject, h.messages, h.maxMessages || "", h.maxBytes ? h.bytes || 0 : "", h.maxBytes || ""])));
    $("subs").textContent = d.subscriptions;
    $("live-contracts").textContent = d.liveContractsTotal;
    const listed = (d.liveContracts || []).length;
    $("live-contracts-shown").textContent = listed < d.liveContractsTotal ? " (the newest " + listed + " shown)" : "";
    fill("negotiated", (d.liveContracts || []).map((k) => {
      const tr = row([k.id, k.principal, k.auth || "", (k.subjects || []).join(", "), local(new Date(k.expiresAt).toLocaleString())]);
      tr.dataset.contract = k.id;
      return tr;
    }));
    $("conns").textContent = d.connections;
    $("audit-records").textContent = d.auditRecords;
    $("qopen").textContent = "(" + d.quarantineOpen + " open)";
    if (d.lastVerify && d.lastVerify.time) verified(d.lastVerify);
    if (d.quarantineOpen !== lastOpen) { lastOpen = d.quarantineOpen; scheduleQuarantine(); }
  }

  function verified(v) {
    const s = $("audit-status");
    s.textContent = v.ok ? "holds (" + v.verified + " records, " + new Date(v.time).toLocaleTimeString() + ")"
      : "BROKEN: " + shown(v.error || "failed");
    s.className = v.ok ? "ok" : "error";
  }

  $("verify").addEventListener("click", async () => {
    $("verify").disabled = true;
    const res = await api("POST", "/v1/audit/verify");
    $("verify").disabled = false;
    if (res.ok) verified(res.body);
    else { $("audit-status").textContent = "could not verify: " + errorText(res); $("audit-status").className = "error"; }
  });

  // Quarantine: reloaded at most once a second when something changed.
  function scheduleQuarantine() {
    if (quarantineTimer) return;
    quarantineTimer = setTimeout(() => { quarantineTimer = null; loadQuarantine(); }, 300);
  }

  async function loadQuarantine() {
    if (!token) return;
    const res = await api("GET", "/v1/quarantine?max=200");
    if (!res.ok) return;
    const recs = (res.body.records || []).slice().reverse();
    fill("quarantine", recs.map((q) => {
      const tr = row([local(new Date(q.time).toLocaleTimeString()), q.subject, q.principal, q.code, q.gate || "", recordText(q), ""]);
      tr.children[5].className = "rec";
      tr.dataset.id = q.id;
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = q.released ? "Released" : "Release";
      b.setAttribute("aria-label", (q.released ? "Released " : "Release ") + shown(q.id));
      b.className = "release";
      const allowed = releasable.has(q.subject);
      b.disabled = q.released || !allowed;
      if (!allowed && !q.released) b.title = "Your principal may not publish on " + shown(q.subject) + ", so it may not release this record";
      b.addEventListener("click", () => release(q.id, b));
      tr.children[6].appendChild(b);
      return tr;
    }));
  }

  function recordText(q) {
    const m = q.message || {};
    return q.id + (q.reason ? " — " + q.reason : "") + (m.data ? " — data " + JSON.stringify(m.data) : "");
  }

  // A contract ends (its lifetime, a policy change): one that did is
  // negotiated again, once, before the release is retried.
  const renegotiable = new Set(["CONTRACT_EXPIRED", "CONTRACT_STALE", "CONTRACT_REVOKED", "CONTRACT_NOT_FOUND", "GRANT_REVOKED"]);

  async function release(id, b) {
    b.disabled = true;
    const path = "/v1/quarantine/" + encodeURIComponent(id) + "/release";
    let res = await api("POST", path, {}, { "x-pigeon-contract": contractId });
    if (!res.ok && res.body && res.body.error && renegotiable.has(res.body.error.code)) {
      await negotiate();
      res = await api("POST", path, {}, { "x-pigeon-contract": contractId });
    }
    const out = $("release-result");
    if (res.ok) {
      out.textContent = shown("Released " + id + " as " + res.body.message.id);
      out.className = "ok";
    } else {
      out.textContent = "Release of " + shown(id) + " refused: " + errorText(res);
      out.className = "error";
      b.disabled = false;
    }
    loadQuarantine();
  }

  // Table helpers: text only, never HTML from the server, with what a
  // reader cannot see written out (shown).
  function row(cells) {
    const tr = document.createElement("tr");
    for (const c of cells) {
      const td = document.createElement("td");
      td.textContent = c instanceof Local ? c.text : shown(c);
      tr.appendChild(td);
    }
    return tr;
  }
  // fill replaces a table's rows; each cell is labelled with its column's
  // name, which the narrow layout shows beside the value.
  function fill(id, rows) {
    const table = $(id);
    const names = [...table.tHead.rows[0].cells].map((th) => th.textContent);
    const f = document.createDocumentFragment();
    for (const r of rows) {
      [...r.cells].forEach((td, i) => { td.dataset.label = names[i] || ""; });
      f.appendChild(r);
    }
    table.tBodies[0].replaceChildren(f);
  }
  function clear(id) { $(id).tBodies[0].replaceChildren(); }
})();
