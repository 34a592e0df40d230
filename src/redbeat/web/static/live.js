// Keeps a page current without a reload the reader notices: relative times ("in 3
// min") are recomputed every few seconds from their data-epoch, and a page whose body
// has data-refresh="N" is fetched again every N seconds and its <main> swapped in,
// unless the reader is busy with it (a field focused or changed, a box ticked, text
// selected) or the tab is hidden. Served from the view itself: the page's
// Content-Security-Policy allows no other script, and every page works without it.
(function () {
  "use strict";
  var UNITS = [[90, 1, "s"], [90 * 60, 60, "min"], [36 * 3600, 3600, "h"], [Infinity, 86400, "d"]];

  function relative(seconds) {
    var size = Math.abs(seconds);
    if (size < 1) { return "now"; }
    for (var i = 0; i < UNITS.length; i++) {
      if (size < UNITS[i][0]) {
        var amount = Math.round(size / UNITS[i][1]) + " " + UNITS[i][2];
        return seconds > 0 ? "in " + amount : amount + " ago";
      }
    }
    return "";
  }

  function tick() {
    var now = Date.now() / 1000;
    var spans = document.querySelectorAll("span.rel[data-epoch]");
    for (var i = 0; i < spans.length; i++) {
      spans[i].textContent = relative(parseFloat(spans[i].getAttribute("data-epoch")) - now);
    }
  }

  var touched = false;
  document.addEventListener("input", function () { touched = true; });
  document.addEventListener("change", function () { touched = true; });

  function busy() {
    var active = document.activeElement;
    var editing = active && /^(INPUT|SELECT|TEXTAREA)$/.test(active.tagName);
    var selected = window.getSelection && String(window.getSelection()) !== "";
    return touched || editing || selected || document.hidden ||
      document.querySelector("input[type=checkbox]:checked") !== null;
  }

  function refresh() {
    if (busy()) { return; }
    fetch(window.location.href, {credentials: "same-origin", cache: "no-store"})
      .then(function (response) { return response.ok ? response.text() : null; })
      .then(function (text) {
        if (text === null || busy()) { return; }
        var fresh = new DOMParser().parseFromString(text, "text/html").querySelector("main");
        var main = document.querySelector("main");
        if (fresh && main) {
          main.replaceChildren.apply(main, Array.prototype.slice.call(fresh.childNodes));
          document.body.setAttribute("data-refreshed", String(Date.now()));
          tick();
        }
      })
      .catch(function () { /* the next round tries again */ });
  }

  var last = Date.now();
  document.addEventListener("DOMContentLoaded", function () {
    tick();
    window.setInterval(tick, 5000);
    // read each second, so the period can change while the page is open
    window.setInterval(function () {
      var every = parseFloat(document.body.getAttribute("data-refresh") || "0");
      if (every > 0 && Date.now() - last >= every * 1000) {
        last = Date.now();
        refresh();
      }
    }, 1000);
  });
}());
