// The overview's live region: every data-every seconds, the console's own /live fragment (an
// HTML fragment it renders, escaped as every page is) is fetched and put in place of the
// region's contents: counts, lateness, throughput and its charts change without a reload.
// Plain script, served by the console itself: no build step, nothing fetched from elsewhere.
(function () {
  "use strict";
  var region = document.getElementById("live");
  if (!region) {
    return;
  }
  var every = Math.max(1, parseInt(region.getAttribute("data-every"), 10) || 10) * 1000;
  var state = document.getElementById("live-state");
  var busy = false;

  function say(text, failing) {
    if (state) {
      state.textContent = text;
      state.className = failing ? "live-failing" : "muted";
    }
  }

  function refresh() {
    if (busy || document.hidden) {
      return;
    }
    busy = true;
    fetch(region.getAttribute("data-src"), {
      credentials: "same-origin", cache: "no-store", headers: {"Accept": "text/html"}
    }).then(function (answer) {
      if (!answer.ok) {
        throw new Error("HTTP " + answer.status);
      }
      return answer.text();
    }).then(function (html) {
      region.innerHTML = html;
      region.setAttribute("data-refreshed", String(Date.now()));
      say("(live)", false);
    }).catch(function (error) {
      say("(live updates failing: " + error.message + "; the figures shown are the last ones read)",
          true);
    }).then(function () {
      busy = false;
    });
  }

  say("(live)", false);
  window.setInterval(refresh, every);
  document.addEventListener("visibilitychange", function () {
    if (!document.hidden) {
      refresh();
    }
  });
}());
