// Savepoint console: live refresh of the page's content and the actions. Every action is a
// call of the public /v1 API; errors it answers are shown next to the button, never swallowed.
(() => {
  "use strict";
  const $ = (sel, root = document) => root.querySelector(sel);
  let busy = false;

  function stamp(text, stale) {
    const u = $("#updated");
    if (!u) return;
    u.textContent = text || "updated " + new Date().toISOString().slice(11, 19) + " UTC";
    u.classList.toggle("stale", !!stale);
  }

  // Someone is typing an answer or a choice: a refresh would throw it away.
  function editing() {
    const a = document.activeElement;
    if (a && ["TEXTAREA", "INPUT", "SELECT"].includes(a.tagName) && a.id !== "live") return true;
    if (document.querySelector("dialog[open]")) return true;
    return [...document.querySelectorAll("textarea.action-value")].some((t) => t.dataset.touched && t.value.trim() !== "");
  }

  // One refresh at a time; a newer one supersedes an older one still loading.
  let generation = 0;

  // `force`: refresh even with "live" unticked (after an action), never while someone edits.
  async function refresh(force) {
    const live = $("#live");
    if ((!force && (!live || !live.checked)) || editing() || busy) return;
    const mine = ++generation;
    try {
      const r = await fetch(location.href, { headers: { Accept: "text/html" } });
      const html = await r.text();
      // Typing started, an action began or a newer refresh ran while this one loaded.
      if (mine !== generation || editing() || busy) return;
      const fresh = new DOMParser().parseFromString(html, "text/html").getElementById("content");
      if (fresh) $("#content").innerHTML = fresh.innerHTML;
      stamp(r.ok ? "" : "refresh answered " + r.status, !r.ok);
    } catch (e) {
      stamp("refresh failed: " + e.message, true);
    }
  }

  // Asks before an action the engine cannot undo; resolves to true when confirmed.
  // Resolves to null when declined, else to the reason typed (when one was asked for).
  function confirmDialog(label, call, askReason) {
    const d = $("#confirm");
    $("#confirm-text").textContent = label;
    $("#confirm-call").textContent = call;
    $("#confirm-reason-box").hidden = !askReason;
    return new Promise((resolve) => {
      d.addEventListener(
        "close",
        () => resolve(d.returnValue === "ok" ? $("#confirm-reason").value.trim() : null),
        { once: true }
      );
      d.returnValue = "";
      d.showModal();
    });
  }

  // The body template with its placeholders filled: "<json>" by the value, "<text>" by the
  // reason (each placeholder is looked up in the template, never in a filled value).
  function fill(template, value, reason) {
    const body = JSON.parse(template);
    for (const k of Object.keys(body)) {
      const slot = body[k];
      if (slot === "<json>") body[k] = value;
      else if (slot === "<text>") body[k] = reason || "from the console";
    }
    return JSON.stringify(body);
  }

  function summary(j) {
    if (!j || typeof j !== "object") return "";
    const parts = [];
    if (j.status) parts.push("run is " + j.status);
    if (j.effect && j.effect.state) parts.push("effect " + j.effect.state);
    if (j.duplicate) parts.push("duplicate (delivered before)");
    return parts.join(", ");
  }

  async function act(btn) {
    const box = btn.closest(".action");
    const out = $(".result", box);
    out.className = "result";
    out.textContent = "";
    const method = btn.dataset.method;
    const path = btn.dataset.path;
    const template = btn.dataset.body || "";
    const ta = btn.dataset.needsValue ? $(".action-value", box) : null;
    let value = null;
    if (ta) {
      try {
        if (ta.value.trim() === "") throw new Error("the value is empty");
        value = JSON.parse(ta.value);
      } catch (e) {
        ta.setAttribute("aria-invalid", "true");
        out.className = "result error";
        out.textContent = "Not valid JSON (" + e.message + "). Nothing was sent.";
        return;
      }
      ta.removeAttribute("aria-invalid");
    }
    let reason = null;
    if (btn.dataset.confirm) {
      reason = await confirmDialog(btn.dataset.label, method + " " + path, !!btn.dataset.needsReason);
      if (reason === null) {
        out.textContent = "Not done: nothing was changed.";
        return;
      }
    }
    const body = template ? fill(template, value, reason) : "";
    btn.disabled = true;
    busy = true;
    try {
      const init = { method, headers: {} };
      if (body) {
        init.headers["Content-Type"] = "application/json";
        init.body = body;
      }
      const r = await fetch(path, init);
      const text = await r.text();
      let j = null;
      try { j = JSON.parse(text); } catch (_) { /* not JSON: shown as text */ }
      if (!r.ok) {
        out.className = "result error";
        out.textContent = r.status + ": " + (j && j.error ? j.error : text);
        btn.disabled = false;
        return;
      }
      out.className = "result ok";
      out.textContent = "Done (" + r.status + ")" + (summary(j) ? ": " + summary(j) : "") + ".";
      if (ta) delete ta.dataset.touched;
      busy = false;
      setTimeout(() => refresh(true), 1200);
    } catch (e) {
      out.className = "result error";
      out.textContent = "The API did not answer: " + e.message;
      btn.disabled = false;
    } finally {
      busy = false;
    }
  }

  document.addEventListener("click", (ev) => {
    const btn = ev.target.closest("button.act");
    if (btn) {
      ev.preventDefault();
      act(btn);
    }
  });
  document.addEventListener("input", (ev) => {
    if (ev.target.matches("textarea.action-value")) ev.target.dataset.touched = "1";
  });
  document.addEventListener("DOMContentLoaded", () => {
    stamp();
    const every = Number(($("#content") || {}).dataset?.refresh || 5) * 1000;
    setInterval(() => refresh(false), every);
  });
})();
