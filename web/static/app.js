// Sluice admin: progressive enhancements. Every page works without this file.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  // "line N" links in the problem list: select that line in the editor.
  const editor = document.getElementById("policy");
  document.querySelectorAll("a.lineref[data-line]").forEach((a) => {
    a.addEventListener("click", (ev) => {
      if (!editor) return;
      ev.preventDefault();
      selectLine(editor, parseInt(a.dataset.line, 10));
    });
  });

  // Confirm before destructive actions (rollback).
  document.querySelectorAll("button[data-confirm]").forEach((b) => {
    b.form.addEventListener("submit", (ev) => {
      if (!window.confirm(b.dataset.confirm)) ev.preventDefault();
    });
  });

  // Copy buttons (shown only where the clipboard API exists).
  document.querySelectorAll("button[data-copy]").forEach((b) => {
    const target = document.getElementById(b.dataset.copy);
    if (!target || !navigator.clipboard) return;
    b.hidden = false;
    b.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(target.textContent);
        b.textContent = "Copied";
      } catch (e) {
        b.textContent = "Copy failed: select the text instead";
      }
      setTimeout(() => { b.textContent = "Copy"; }, 2000);
    });
  });

  // The dashboard's reset form: with "every identity of the rule" ticked
  // the key is not sent (the server refuses a key with the box).
  const resetAll = document.getElementById("reset-all");
  const resetKey = document.getElementById("reset-key");
  if (resetAll && resetKey) {
    const keyUnused = () => { resetKey.disabled = resetAll.checked; };
    resetAll.addEventListener("change", keyUnused);
    keyUnused();
  }

  // Live regions that refresh themselves (the nodes table).
  document.querySelectorAll("[data-refresh]").forEach((el) => refresh(el));

  // The conversion form: show only the fields the chosen source reads.
  const from = document.getElementById("mg-from");
  if (from) {
    const showFields = () => {
      const reads = (from.selectedOptions[0]?.dataset.reads || "").split(" ");
      document.querySelectorAll("#migrate-form [data-field]").forEach((p) => {
        p.hidden = !reads.includes(p.dataset.field);
      });
    };
    from.addEventListener("change", showFields);
    showFields();
  }
});

function selectLine(textarea, line) {
  const lines = textarea.value.split("\n");
  if (!(line >= 1 && line <= lines.length)) return;
  let start = 0;
  for (let i = 0; i < line - 1; i++) start += lines[i].length + 1;
  textarea.focus();
  textarea.setSelectionRange(start, start + lines[line - 1].length);
  const lh = parseFloat(getComputedStyle(textarea).lineHeight) || 18;
  textarea.scrollTop = Math.max(0, (line - 4) * lh);
}

function refresh(el) {
  const url = el.dataset.refresh;
  setTimeout(async () => {
    if (!document.hidden) {
      try {
        const res = await fetch(url, { headers: { "Accept": "text/html" } });
        if (res.redirected || res.status === 401) {
          return; // logged out: stop
        }
        if (res.ok) {
          const tpl = document.createElement("template");
          tpl.innerHTML = await res.text();
          const fresh = tpl.content.querySelector("[data-refresh]");
          if (fresh) {
            el.replaceWith(fresh);
            el = fresh;
          }
        }
      } catch (e) {
        // admin unreachable: try again later
      }
    }
    refresh(el);
  }, 3000);
}
