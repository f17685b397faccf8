// Sluice admin, policy page: Rules/JSON tabs and the rule form's fields
// for the chosen algorithm. Without this file both views show one above
// the other and every field of the rule form is shown.
"use strict";

document.addEventListener("DOMContentLoaded", () => {
  const tabs = document.querySelector(".view-tabs");
  const rules = document.getElementById("rules-view");
  const json = document.getElementById("json-view");
  if (tabs && rules && json) {
    const buttons = tabs.querySelectorAll("button[data-tab]");
    const show = (id) => {
      rules.hidden = id !== "rules-view";
      json.hidden = id !== "json-view";
      buttons.forEach((b) => b.setAttribute("aria-selected", String(b.dataset.tab === id)));
    };
    buttons.forEach((b) => b.addEventListener("click", () => {
      show(b.dataset.tab);
      try { sessionStorage.setItem("sluice-policy-view", b.dataset.tab); } catch (e) { /* storage off */ }
    }));
    tabs.hidden = false;
    // Problems are listed against lines of the JSON: show that view then;
    // else the view last chosen in this tab, else the rules.
    let view = "rules-view";
    try { view = sessionStorage.getItem("sluice-policy-view") || view; } catch (e) { /* storage off */ }
    if (document.getElementById("problems") || rules.querySelector(".flash-warn")) view = "json-view";
    if (document.getElementById("rule-form")) view = "rules-view";
    show(view);
  }

  // The rule form shows the fields of the chosen action and algorithm
  // (without JavaScript it shows them all; the server ignores the others).
  const alg = document.getElementById("rf_algorithm");
  const action = document.getElementById("rf_action");
  if (alg && action) {
    const algShows = (want, a) =>
      want === a || (want === "window" && a.endsWith("_window")) ||
      (want === "limit" && (a.endsWith("_window") || a === "quota" || a === "concurrency"));
    const sync = () => {
      const act = action.value || "limit";
      document.querySelectorAll("#rule-form [data-action], #rule-form [data-alg]").forEach((el) => {
        const byAction = !el.dataset.action || el.dataset.action.split(" ").includes(act);
        const byAlg = !el.dataset.alg || algShows(el.dataset.alg, alg.value);
        el.hidden = !(byAction && byAlg);
      });
    };
    alg.addEventListener("change", sync);
    action.addEventListener("change", sync);
    sync();
  }
});
