// Feedback the server cannot give in time: a Stop shows "stopping…" as soon as it is confirmed
// (the host takes seconds to end the server), and "copy" buttons put a block's text on the clipboard.
(function () {
  "use strict";

  document.addEventListener("htmx:beforeRequest", function (evt) {
    var form = evt.detail && evt.detail.elt;
    if (!form || !form.matches || !form.matches("form.stop")) return;
    var status = document.getElementById("status");
    if (status && form.hasAttribute("data-marks-status")) {  // not the Stop for processes left behind
      status.textContent = "stopping…";
      status.className = "status status-stopping";
    }
    var button = form.querySelector("button[type=submit]");
    if (button) {
      button.textContent = "stopping…";
      button.disabled = true;
    }
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
