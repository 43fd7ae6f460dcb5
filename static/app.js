// Feedback the server cannot give in time: a Stop shows "stopping…" as soon as it is confirmed
// (the host takes seconds to end the server), "copy" buttons put a block's text on the clipboard,
// and the launch form keeps its preflight honest.
(function () {
  "use strict";

  document.addEventListener("htmx:beforeRequest", function (evt) {
    var form = evt.detail && evt.detail.elt;
    if (!form || !form.matches || !form.matches("form.stop, button[data-stop]")) return;
    var status = document.getElementById("status");
    if (status && form.hasAttribute("data-marks-status")) {  // not the Stop for processes left behind
      status.textContent = "stopping…";
      status.className = "status status-stopping";
    }
    var button = form.matches("button") ? form : form.querySelector("button[type=submit]");
    if (button) {
      button.textContent = "stopping…";
      button.disabled = true;
    }
  });

  // The launch form: "use port N" puts the free port in the port field, keeping every other choice
  // as it is on screen, and runs preflight again; a choice changed after a preflight makes its
  // result stale, so it is taken off the screen with a note rather than left to mislead.
  document.addEventListener("click", function (evt) {
    var use = evt.target.closest && evt.target.closest("[data-use-port]");
    var form = use && use.closest("form");
    if (!form) return;
    var port = form.querySelector("input[name=port]");
    port.value = use.dataset.usePort;
    port.dispatchEvent(new Event("input", { bubbles: true }));  // the command preview follows
    form.querySelector("button[formaction='/launch/preflight']").click();
  });

  function preflightStale(evt) {
    var form = evt.target.closest && evt.target.closest("#launch-form");
    var preflight = form && form.querySelector("#preflight");
    if (!preflight || !preflight.children.length || evt.target.matches("[name=override], [name=override_reason], [name=confirm_failed_before]")) return;
    var note = document.createElement("p");
    note.className = "muted stale-preflight";
    note.textContent = preflight.dataset.staleNote;
    preflight.replaceChildren(note);
  }
  document.addEventListener("change", preflightStale);
  document.addEventListener("input", function (evt) {
    if (evt.isTrusted) preflightStale(evt);  // typed, not the port "use port N" just put in
  });

  function copied(button, text) {
    var before = button.textContent;
    button.textContent = text;
    setTimeout(function () { button.textContent = before; }, 1500);
  }

  document.addEventListener("click", function (evt) {
    var button = evt.target.closest && evt.target.closest("button[data-copy]");
    if (!button) return;
    var source = document.getElementById(button.dataset.copy);
    if (!source) return;
    var text = source.textContent.trim();
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(text).then(
        function () { copied(button, "copied"); },
        function () { copied(button, "select and copy"); }
      );
      return;
    }
    // Plain http to a remote dashboard has no clipboard API: select the text for Ctrl+C.
    var range = document.createRange();
    range.selectNodeContents(source);
    var selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
    copied(button, "selected: press Ctrl+C");
  });
})();
