// Follows a running execution: while the page's #live element asks for it
// (data-refresh-seconds, set only while the execution runs), fetch the page
// again and swap in the fresh #live. Once the execution has ended the fresh
// copy no longer asks, and polling stops. Open <details> stay open.
(function () {
  "use strict";

  function schedule() {
    var live = document.getElementById("live");
    if (!live || !live.dataset.refreshSeconds) return;
    window.setTimeout(refresh, Number(live.dataset.refreshSeconds) * 1000);
  }

  function openDetails(root) {
    return Array.prototype.map.call(root.querySelectorAll("details"), function (item) { return item.open; });
  }

  function swap(html) {
    var fresh = new DOMParser().parseFromString(html, "text/html").getElementById("live");
    var live = document.getElementById("live");
    if (!fresh || !live) return false; // e.g. the session ended and this is the login page
    var open = openDetails(live);
    fresh.querySelectorAll("details").forEach(function (item, index) { item.open = Boolean(open[index]); });
    live.replaceWith(document.importNode(fresh, true));
    return true;
  }

  function refresh() {
    fetch(window.location.href, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) {
        if (!response.ok) throw new Error("HTTP " + response.status);
        return response.text();
      })
      .then(function (html) { if (swap(html)) schedule(); })
      .catch(function () { schedule(); }); // a failed fetch (a restart, a blip): try again later
  }

  document.addEventListener("DOMContentLoaded", schedule);
})();
