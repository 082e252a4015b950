// The console's one script: it reads the open page again every few seconds and swaps
// in the parts marked data-live, so figures move without a reload. Forms, filters
// and the scroll position stay as they are.
"use strict";

(function () {
  const seconds = Number(document.body.dataset.refreshSeconds || 0);
  if (!seconds) {
    return;
  }
  const stamp = document.getElementById("refreshed");

  async function refresh() {
    if (document.hidden || !document.querySelector("[data-live]")) {
      return;
    }
    let answer;
    try {
      answer = await fetch(window.location.href, {
        headers: { "X-Console-Refresh": "1" },
        credentials: "same-origin",
        cache: "no-store",
      });
    } catch (error) {
      if (stamp) stamp.textContent = "The service did not answer; retrying.";
      return;
    }
    if (answer.status === 401) {
      window.location.reload(); // the session ended: the page asks for a sign-in
      return;
    }
    if (!answer.ok) {
      return;
    }
    const fresh = new DOMParser().parseFromString(await answer.text(), "text/html");
    for (const part of document.querySelectorAll("[data-live][id]")) {
      const replacement = fresh.getElementById(part.id);
      if (replacement) {
        part.replaceWith(document.adoptNode(replacement));
      }
    }
    if (stamp) stamp.textContent = "Figures read at " + new Date().toLocaleTimeString() + ".";
  }

  window.setInterval(refresh, seconds * 1000);
})();
