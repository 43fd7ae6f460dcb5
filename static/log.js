// The log views, with a few lines of plain JS on top of htmx.
// The live log: keeps the stream's URL at the last offset received, so that a reconnection by a
// fresh EventSource (htmx makes one after an error, and it sends no Last-Event-ID) resumes exactly
// where the page is; follows the end of the log until the user scrolls up, then counts the lines
// that arrive meanwhile on a "jump to the end" button; keeps the page's number of lines bounded.
// The full log: scrolls its target line (a line, an offset, the first error, the bottom, a shared
// #L1234 link) into view and highlights it, unfolding what holds it. Both: launch stages as
// sections and progress bars as their last state, either folded at will; keyboard shortcuts
// (? lists them) and a switch that shows or hides SGLang's timestamps.
(function () {
  "use strict";
  var MAX_LIVE_LINES = 5000;
  var KEYS = [
    ["/", "search this log (grep)"],
    ["n / N", "next / previous grep hit"],
    ["e / E", "next / previous error line"],
    ["g / G", "top / bottom of the log"],
    ["f", "follow the end of the live log (again to pause)"],
    ["t", "show or hide timestamps"],
    ["?", "this help"],
  ];

  function liveLog(elt) {
    return elt && elt.closest ? elt.closest("[data-live-log]") : null;
  }

  function atBottom(box) {
    return box.scrollHeight - box.scrollTop - box.clientHeight < 40;
  }

  function showFollowing(box) {
    var jump = document.getElementById("follow-end");
    if (!jump) return;
    if (atBottom(box)) box.dataset.unseen = "0";
    var unseen = +(box.dataset.unseen || 0);
    jump.hidden = atBottom(box);
    var count = document.getElementById("new-lines");
    if (count) count.textContent = unseen === 1 ? "1 new line" : unseen.toLocaleString() + " new lines";
  }

  function follow(box) {
    box.scrollTop = box.scrollHeight;
    showFollowing(box);
  }

  document.addEventListener("htmx:sseBeforeMessage", function (evt) {
    var box = liveLog(evt.target);
    if (!box) return;
    box.dataset.stick = atBottom(box) ? "1" : "";
    box.dataset.before = box.querySelector("[sse-swap]").querySelectorAll(".ln").length;
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
    joinSections(lines);
    countLog(id, lines);
    if (!box.dataset.stick) {
      var added = lines.querySelectorAll(".ln").length - +(box.dataset.before || 0);
      box.dataset.unseen = +(box.dataset.unseen || 0) + Math.max(added, 0);
    }
    trim(lines);
    if (box.dataset.stick) box.scrollTop = box.scrollHeight;
    showFollowing(box);
  });

  // Lines arrive in batches, each swapped in at the end: those that carry on the last stage's
  // section join it, a progress bar's new state folds the one before it (as the server folds a
  // bar's states within a batch), and a section's time is filled in once the next one starts.
  function joinSections(lines) {
    var section = null;
    Array.prototype.slice.call(lines.children).forEach(function (child) {
      if (child.matches("details.stage")) {
        if (section) tookUntil(section, child);
        section = child;
      } else if (section) {
        section.appendChild(child);
      }
    });
    foldRuns(section || lines);
  }

  function tookUntil(section, next) {
    var took = section.querySelector(":scope > summary .took");
    if (!took || took.textContent) return;
    var start = parseFloat(section.dataset.at), end = parseFloat(next.dataset.at);
    if (isNaN(start) || isNaN(end)) { took.textContent = "\u2014"; return; }
    var seconds = Math.round(end - start);  // as app/logs/stages.py's took()
    if (seconds < 0) seconds += 86400;
    took.textContent = seconds < 60 ? seconds + " s" : Math.floor(seconds / 60) + " min " + String(seconds % 60).padStart(2, "0") + " s";
  }

  function foldRuns(container) {
    var items = Array.prototype.slice.call(container.children);
    for (var i = 0; i < items.length - 1; i++) {
      var row = items[i], next = items[i + 1], bar = row.getAttribute("data-bar");
      if (bar === null || !row.matches(".ln") || next.getAttribute("data-bar") !== bar) continue;
      var fold = next.matches("details.progress") ? next : null;
      if (!fold) {
        fold = document.createElement("details");
        fold.className = "progress";
        fold.setAttribute("data-bar", bar);
        fold.appendChild(document.createElement("summary"));
        row.after(fold);
      }
      var before = row.previousElementSibling;
      fold.insertBefore(row, fold.querySelector(":scope > summary").nextSibling);
      if (before && before.matches("details.progress") && before.getAttribute("data-bar") === bar) {
        before.querySelectorAll(":scope > .ln").forEach(function (earlier) { fold.insertBefore(earlier, row); });
        before.remove();
      }
      var count = fold.querySelectorAll(":scope > .ln").length;
      fold.querySelector(":scope > summary").textContent = count.toLocaleString("en-US") + " earlier state" + (count === 1 ? "" : "s");
    }
  }

  // At most MAX_LIVE_LINES lines, the oldest going first, and with them the folds they leave empty.
  function trim(lines) {
    var rows = lines.querySelectorAll(".ln, .marker");
    for (var i = 0; i < rows.length - MAX_LIVE_LINES; i++) rows[i].remove();
    if (rows.length <= MAX_LIVE_LINES) return;
    lines.querySelectorAll("details.progress, details.traceback").forEach(function (fold) {
      if (!fold.querySelector(".ln")) fold.remove();
    });
  }

  // The header's counts, as lines arrive: the event id is the log's size in bytes, and the last
  // line's number its count of lines.
  function countLog(offset, lines) {
    var bytes = document.getElementById("log-bytes");
    if (bytes && offset) bytes.textContent = (+offset).toLocaleString("en-US");
    var numbered = lines.querySelectorAll(".ln[id^=L]");
    var last = numbered[numbered.length - 1];
    var count = document.getElementById("log-lines");
    var number = last && /^L(\d+)$/.exec(last.id);
    if (count && number) count.textContent = (+number[1]).toLocaleString("en-US");
  }

  // A status refresh brings the log's state (template[data-log-state]): it replaces the header's
  // when that header is of the same attempt and still on screen. (An out-of-band swap would log an
  // error for a refresh that lands after the person moved on.)
  document.addEventListener("htmx:load", function (evt) {
    var elt = evt.detail.elt;
    var fresh = elt.querySelector && elt.querySelector("template[data-log-state]");
    var state = fresh && fresh.content.querySelector("#log-state");
    var shown = state && document.querySelector("#log-state[data-log-of='" + state.dataset.logOf + "']");
    if (shown) shown.replaceWith(state);
  });

  // A live log swapped in, by a page load or a boosted navigation: starts at its end.
  document.addEventListener("htmx:load", function (evt) {
    var elt = evt.detail.elt;
    if (!elt.querySelectorAll) return;
    var boxes = Array.prototype.slice.call(elt.querySelectorAll("[data-live-log]"));
    if (elt.matches("[data-live-log]")) boxes.push(elt);
    boxes.forEach(function (box) {
      if (box.dataset.started) return;
      box.dataset.started = "1";
      box.scrollTop = box.scrollHeight;
      box.addEventListener("scroll", function () { showFollowing(box); });
    });
  });

  document.addEventListener("click", function (evt) {
    var jump = evt.target.closest && evt.target.closest("#follow-end");
    var box = jump && liveLog(jump);
    if (box) follow(box);
  });

  // The full log's target line.
  function lineOf(number) {
    return number ? document.getElementById("L" + number) : null;
  }

  function showLine(line) {
    document.querySelectorAll("#log .ln.mark").forEach(function (other) { other.classList.remove("mark"); });
    line.classList.add("mark");
    unfold(line);
    line.scrollIntoView({ block: "center" });
  }

  // A line shown on purpose is never left inside a folded traceback, progress bar or stage.
  function unfold(line) {
    for (var fold = line.closest("details"); fold; fold = fold.parentElement.closest("details")) fold.open = true;
  }

  // A shared link names a line (#L12) or a range of lines (#L10-L42), as on GitHub.
  var LINK = /^#L(\d+)(?:-L(\d+))?$/;

  function showRange(first, last) {
    for (var n = first + 1; n <= last; n++) {
      var line = lineOf(n);
      if (line) { line.classList.add("mark"); unfold(line); }
    }
  }

  function showTarget() {
    var log = document.getElementById("log");
    if (!log) return;
    var found = LINK.exec(location.hash);
    var line = lineOf(found ? found[1] : log.dataset.target);
    if (!line) return;
    showLine(line);
    if (found && found[2]) showRange(+found[1], +found[2]);
  }

  function openDeepLink() {
    var found = LINK.exec(location.hash);
    var log = document.getElementById("log");
    if (!found || !log) return;
    if (!lineOf(found[1])) location.replace(log.dataset.href + "?line=" + found[1] + location.hash);
    else showTarget();
  }

  // Shift-click on a line's number after another's: the link to the lines between, in the address bar.
  document.addEventListener("click", function (evt) {
    var number = evt.target.closest && evt.target.closest("#log .ln a.n");
    var from = LINK.exec(location.hash);
    if (!number || !evt.shiftKey || !from) return;
    var to = /#L(\d+)$/.exec(number.getAttribute("href"));
    if (!to) return;
    evt.preventDefault();
    evt.stopPropagation();  // nor a boosted navigation to that one line
    var first = Math.min(+from[1], +to[1]), last = Math.max(+from[1], +to[1]);
    history.replaceState(null, "", "#L" + first + "-L" + last);
    showTarget();
  }, true);  // before htmx's own listener on the link
  window.addEventListener("hashchange", openDeepLink);
  document.addEventListener("DOMContentLoaded", function () { showTarget(); openDeepLink(); });
  document.addEventListener("htmx:afterSettle", function (evt) {
    // A boosted page load: after htmx has scrolled the new page to its top.
    if (evt.detail.elt === document.body) setTimeout(showTarget, 0);
  });

  // Filters: one node's lines (the merged log tags each "[nodeN host] "), errors, or errors and
  // warnings; the others are hidden, and so are those that arrive later.
  function filters() {
    var chosen = {};
    document.querySelectorAll("[data-log-filter]").forEach(function (select) {
      chosen[select.dataset.logFilter] = select.value;
    });
    return chosen;
  }

  function shown(line, chosen) {
    if (chosen.level === "error" && !line.classList.contains("error")) return false;
    if (chosen.level === "warning" && !line.matches(".error, .warning")) return false;
    if (chosen.node) {
      var text = line.querySelector(".t");
      if (!text || text.textContent.indexOf("[node" + chosen.node + " ") !== 0) return false;
    }
    return true;
  }

  function applyFilters() {
    var chosen = filters();
    document.querySelectorAll("#log .ln, #live-lines .ln").forEach(function (line) {
      line.hidden = !shown(line, chosen);
    });
  }
  document.addEventListener("change", function (evt) {
    if (evt.target.matches && evt.target.matches("[data-log-filter]")) applyFilters();
  });
  document.addEventListener("htmx:sseMessage", function (evt) {
    if (liveLog(evt.target) && (filters().node || filters().level)) applyFilters();
  });

  // Timestamps, shown or hidden on every log view, remembered by the browser.
  function showTimestamps(show) {
    document.documentElement.classList.toggle("hide-ts", !show);
    document.querySelectorAll("[data-show-ts]").forEach(function (box) { box.checked = show; });
    try { localStorage.setItem("launchdeck.hide-ts", show ? "" : "1"); } catch (e) { /* private mode */ }
  }
  try { if (localStorage.getItem("launchdeck.hide-ts")) document.documentElement.classList.add("hide-ts"); } catch (e) { /* none */ }
  document.addEventListener("change", function (evt) {
    if (evt.target.matches && evt.target.matches("[data-show-ts]")) showTimestamps(evt.target.checked);
  });
  document.addEventListener("htmx:load", function () {
    var hidden = document.documentElement.classList.contains("hide-ts");
    document.querySelectorAll("[data-show-ts]").forEach(function (box) { box.checked = !hidden; });
  });

  // Keyboard shortcuts.
  function stepHit(step) {
    var hits = Array.prototype.slice.call(document.querySelectorAll("#grep-results .ln.mark"));
    if (!hits.length) return;
    var at = hits.findIndex(function (hit) { return hit.classList.contains("current"); });
    if (at >= 0) hits[at].classList.remove("current");
    var next = hits[((at < 0 && step < 0 ? 0 : at) + step + hits.length) % hits.length];
    next.classList.add("current");
    next.scrollIntoView({ block: "center" });
  }

  // The next (or previous) error line after the one marked, in the live log or this page of the full log.
  function stepError(step) {
    var errors = Array.prototype.slice.call(document.querySelectorAll("#log .ln.error, #live-lines .ln.error"));
    if (!errors.length) return;
    var marked = document.querySelector("#log .ln.mark, #live-lines .ln.mark");
    var at = marked ? errors.indexOf(marked) : -1;
    if (at < 0 && marked) {  // a mark that is not an error: the first error after (or before) it
      var after = errors.findIndex(function (line) {
        return marked.compareDocumentPosition(line) & Node.DOCUMENT_POSITION_FOLLOWING;
      });
      at = step > 0 ? (after < 0 ? errors.length : after) - 1 : (after < 0 ? errors.length : after);
    }
    var next = errors[Math.min(Math.max(at + step, 0), errors.length - 1)];
    document.querySelectorAll("#live-lines .ln.mark").forEach(function (other) { other.classList.remove("mark"); });
    if (next.closest("#log")) {
      showLine(next);
    } else {
      next.classList.add("mark");
      unfold(next);
      next.scrollIntoView({ block: "center" });
    }
  }

  function toEnd(bottom) {
    var box = document.querySelector("[data-live-log]");
    if (box) {
      if (bottom) follow(box);
      else box.scrollTop = 0;
      return;
    }
    var away = document.querySelector(bottom ? ".log-nav a[rel=next]" : ".log-nav a[rel=prev]");
    var lines = document.querySelectorAll("#log .ln");
    if (away || !lines.length) {
      var link = document.getElementById(bottom ? "log-bottom" : "log-top");
      if (link) link.click();
    } else {
      showLine(lines[bottom ? lines.length - 1 : 0]);
    }
  }

  function toggleFollow() {
    var box = document.querySelector("[data-live-log]");
    var log = document.getElementById("log");
    if (box && atBottom(box)) box.scrollTop = Math.max(0, box.scrollTop - box.clientHeight / 2);
    else if (box) follow(box);
    else if (log && log.dataset.live) location.href = log.dataset.live;
    if (box) showFollowing(box);
  }

  function help() {
    var dialog = document.getElementById("log-keys");
    if (!dialog) {
      dialog = document.createElement("dialog");
      dialog.id = "log-keys";
      dialog.setAttribute("aria-label", "Keyboard shortcuts");
      var title = document.createElement("h2");
      title.textContent = "Keyboard shortcuts";
      var list = document.createElement("dl");
      KEYS.forEach(function (entry) {
        var key = document.createElement("dt");
        key.textContent = entry[0];
        var what = document.createElement("dd");
        what.textContent = entry[1];
        list.append(key, what);
      });
      var close = document.createElement("button");
      close.type = "button";
      close.textContent = "Close";
      close.addEventListener("click", function () { dialog.close(); });
      dialog.append(title, list, close);
      document.body.appendChild(dialog);
    }
    if (dialog.open) dialog.close();
    else dialog.showModal();
  }

  var ACTIONS = {
    "/": function () {
      var grep = document.querySelector("form.grep input[name=q]");
      if (grep) { grep.focus(); grep.select(); }
    },
    "e": function () { stepError(1); },
    "E": function () { stepError(-1); },
    "n": function () { stepHit(1); },
    "N": function () { stepHit(-1); },
    "g": function () { toEnd(false); },
    "G": function () { toEnd(true); },
    "f": toggleFollow,
    "t": function () { showTimestamps(document.documentElement.classList.contains("hide-ts")); },
    "?": help,
  };

  document.addEventListener("keydown", function (evt) {
    var target = evt.target;
    if (evt.key === "Escape" && target.matches && target.matches("form.grep input")) { target.blur(); return; }
    if (evt.ctrlKey || evt.metaKey || evt.altKey || evt.defaultPrevented) return;
    if (target.closest && target.closest("input, textarea, select, [contenteditable]")) return;
    if (!document.querySelector("#log, [data-live-log]")) return;
    var action = ACTIONS[evt.key];
    if (!action) return;
    evt.preventDefault();
    action();
  });
})();
