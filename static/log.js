// The live log: keeps the stream's URL at the last offset received, so that a reconnection by a
// fresh EventSource (htmx makes one after an error, and it sends no Last-Event-ID) resumes exactly
// where the page is; follows the end of the log until the user scrolls up; keeps the page's
// number of lines bounded. The full log: opens a shared deep link (#L1234) at its line.
(function () {
  "use strict";
  var MAX_LIVE_LINES = 5000;

  function liveLog(elt) {
    return elt && elt.closest ? elt.closest("[data-live-log]") : null;
  }

  function atBottom(box) {
    return box.scrollHeight - box.scrollTop - box.clientHeight < 40;
  }

  function showFollowing(box) {
    var state = document.getElementById("follow-state");
    if (state) state.hidden = atBottom(box);
  }

  document.addEventListener("htmx:sseBeforeMessage", function (evt) {
    var box = liveLog(evt.target);
    if (box) box.dataset.stick = atBottom(box) ? "1" : "";
  });

  document.addEventListener("htmx:sseMessage", function (evt) {
    var box = liveLog(evt.target);
    if (!box) return;
    var id = evt.detail && evt.detail.lastEventId;
    if (id) {
      var url = box.getAttribute("sse-connect").replace(/([?&]offset=)\d*/, "$1" + id);
      box.setAttribute("sse-connect", url);
      box.dataset.offset = id;
    }
    var lines = box.querySelector("[sse-swap]");
    var extra = lines.children.length - MAX_LIVE_LINES;
    for (var i = 0; i < extra; i++) lines.removeChild(lines.firstElementChild);
    if (box.dataset.stick) box.scrollTop = box.scrollHeight;
    showFollowing(box);
  });

  document.addEventListener("htmx:load", function (evt) {
    var boxes = evt.detail.elt.querySelectorAll ? evt.detail.elt.querySelectorAll("[data-live-log]") : [];
    boxes.forEach(function (box) {
      box.scrollTop = box.scrollHeight;
      box.addEventListener("scroll", function () { showFollowing(box); });
    });
  });

  document.addEventListener("click", function (evt) {
    if (evt.target.id !== "follow-end") return;
    var box = document.querySelector("[data-live-log]");
    if (box) { box.scrollTop = box.scrollHeight; showFollowing(box); }
  });

  function openDeepLink() {
    var found = /^#L(\d+)$/.exec(location.hash);
    var log = document.getElementById("log");
    if (!found || !log || document.getElementById("L" + found[1])) return;
    location.replace(log.dataset.href + "?line=" + found[1] + location.hash);
  }
  window.addEventListener("hashchange", openDeepLink);
  document.addEventListener("DOMContentLoaded", openDeepLink);
})();
