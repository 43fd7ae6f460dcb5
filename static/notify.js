// The attempt being watched, in the tab: its status in the title and the icon, and, once the user
// asked for it ("notify me", remembered in this browser), a desktop notification when it becomes
// ready, fails or turns unhealthy. The status is read from the page (#status) whenever the page
// changes, so it follows whatever updates the page, a poll or a stream. The attempt page names the
// attempt on an element (data-watch-attempt, data-preset, data-host) and has a #notify-slot for the
// button; other pages have neither.
(function () {
  "use strict";

  var STORAGE_KEY = "launchdeck.notify";
  var LOOK = {  // glyph in the title, colour of the icon
    pending: ["…", "#6b7280"], uploading: ["…", "#6b7280"], starting: ["…", "#2563eb"],
    loading: ["…", "#2563eb"], ready: ["✓", "#15803d"], unhealthy: ["!", "#b45309"],
    failed: ["✗", "#b91c1c"], stopped: ["■", "#6b7280"], lost: ["?", "#6b7280"]
  };
  var FINISHED = { failed: true, stopped: true, lost: true };
  var NOTIFIED = { ready: true, failed: true, unhealthy: true };
  var STATUS_WORD = new RegExp("\\b(" + Object.keys(LOOK).join("|") + ")\\b");
  var watched = { id: null, status: null };
  var plainIcon = null;

  function iconLink() {
    var link = document.querySelector("link[rel~=icon]");
    if (!link) {
      link = document.createElement("link");
      link.rel = "icon";
      document.head.appendChild(link);
    }
    if (plainIcon === null) plainIcon = link.getAttribute("href") || "data:,";
    return link;
  }

  function iconFor(status) {
    var svg = '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16">' +
      '<circle cx="8" cy="8" r="7" fill="' + LOOK[status][1] + '"/></svg>';
    return "data:image/svg+xml," + encodeURIComponent(svg);
  }

  function show(watch, status) {
    var title = LOOK[status][0] + " " + status + " · #" + watch.dataset.watchAttempt + " " +
      watch.dataset.preset + " — launchdeck";
    if (document.title !== title) document.title = title;
    var link = iconLink();
    if (link.dataset.status !== status) {
      link.href = iconFor(status);
      link.dataset.status = status;
    }
  }

  function forget() {
    watched = { id: null, status: null };
    var link = document.querySelector("link[rel~=icon]");
    if (link && plainIcon !== null && link.dataset.status) {
      link.href = plainIcon;
      delete link.dataset.status;
    }
  }

  function canNotify() {
    return "Notification" in window;
  }

  function notifying() {
    return canNotify() && Notification.permission === "granted" && localStorage.getItem(STORAGE_KEY) === "on";
  }

  function renderButton(button) {
    var blocked = canNotify() && Notification.permission === "denied";
    var on = notifying();
    button.textContent = blocked ? "notifications blocked by the browser" : on ? "notifications on" : "notify me";
    button.disabled = blocked;
    button.setAttribute("aria-pressed", on ? "true" : "false");
    button.title = on ? "stop notifying" : "a desktop notification when this attempt is ready or fails";
  }

  function ensureButton(watch) {
    if (!canNotify() || document.getElementById("notify-toggle")) return;
    var button = document.createElement("button");
    button.type = "button";
    button.id = "notify-toggle";
    button.className = "notify-toggle";
    button.addEventListener("click", function () {
      if (notifying()) {
        localStorage.setItem(STORAGE_KEY, "off");
        renderButton(button);
        return;
      }
      localStorage.setItem(STORAGE_KEY, "on");
      if (Notification.permission === "default") {
        Notification.requestPermission().then(function () { renderButton(button); });
      }
      renderButton(button);
    });
    renderButton(button);
    (document.getElementById("notify-slot") || watch).appendChild(button);
  }

  function notify(watch, status) {
    if (!notifying()) return;
    var root = document.querySelector("#root-error .root-line") || document.getElementById("attempt-error");
    var where = watch.dataset.preset + " on " + watch.dataset.host;
    try {
      var notification = new Notification("launchdeck: #" + watch.dataset.watchAttempt + " " + status, {
        body: root && status !== "ready" ? where + "\n" + root.textContent.trim() : where,
        tag: "launchdeck-attempt-" + watch.dataset.watchAttempt,
        icon: iconFor(status)
      });
      notification.onclick = function () { window.focus(); notification.close(); };
    } catch (err) {
      console.warn("launchdeck: could not show a notification", err);
    }
  }

  function sync() {
    var watch = document.querySelector("[data-watch-attempt]");
    if (!watch) { forget(); return; }
    var element = document.getElementById("status");
    var found = element && STATUS_WORD.exec(element.textContent);
    if (!found) return;
    var status = found[1];
    ensureButton(watch);
    show(watch, status);
    var id = watch.dataset.watchAttempt;
    if (watched.id !== id) {
      watched = { id: id, status: status };  // as the page opened: nothing happened while it was watched
      return;
    }
    var before = watched.status;
    watched.status = status;
    if (before !== status && NOTIFIED[status] && !FINISHED[before]) notify(watch, status);
  }

  new MutationObserver(sync).observe(document.documentElement, { childList: true, subtree: true, characterData: true });
  sync();
})();
