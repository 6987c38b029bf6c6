/* comgra-like GUI: keyboard navigation of the dependency graph and the live badge.
   Served from assets/ (no CDN). */
(function () {
  "use strict";

  var DIRECTIONS = {ArrowLeft: "left", ArrowRight: "right", ArrowUp: "up", ArrowDown: "down"};
  // Keys typed into these belong to them: dropdowns, sliders, inputs, editable text.
  var OWN_KEYS = "input, textarea, select, [contenteditable=''], [contenteditable='true'], " +
    "[role='combobox'], [role='listbox'], [role='option'], [role='slider'], [role='menu'], " +
    "[role='spinbutton'], .dash-dropdown, .dash-slider, .rc-slider";

  document.addEventListener("keydown", function (event) {
    var direction = DIRECTIONS[event.key];
    if (!direction || event.altKey || event.ctrlKey || event.metaKey || event.shiftKey) {
      return;
    }
    var target = event.target;
    if (target && target.closest && target.closest(OWN_KEYS)) {
      return;
    }
    if (!document.getElementById("dependency-graph-container")) {
      return;  // not on the Tensors page
    }
    var clientside = window.dash_clientside;
    if (!clientside || typeof clientside.set_props !== "function") {
      return;
    }
    event.preventDefault();  // no page scrolling while walking the graph
    clientside.set_props("key-event", {data: {direction: direction, time: Date.now()}});
  });

  function clock(seconds) {
    if (!seconds) {
      return "–";
    }
    var d = new Date(seconds * 1000);
    var pad = function (n) { return (n < 10 ? "0" : "") + n; };
    return pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds());
  }

  window.dash_clientside = Object.assign({}, window.dash_clientside, {
    comgra: {
      liveBadge: function (status, selection) {
        if (!status) {
          return ["connecting…", "live-badge badge-waiting", ""];
        }
        var trial = selection && selection.current ? selection.current.trial : null;
        var trialStatus = trial && status.trials ? status.trials[trial] : null;
        var skipped = (status.skipped || []).length;
        var parts = [];
        var cls = "live-badge ";
        if (trialStatus === "running") {
          parts.push("● live");
          cls += "badge-live";
        } else if (trialStatus) {
          parts.push(trialStatus);
          cls += "badge-finished";
        } else {
          parts.push("waiting for data");
          cls += "badge-waiting";
        }
        parts.push("last data " + clock(status.last_data));
        if (skipped) {
          parts.push(skipped + " skipped");
          cls += " badge-skipped";
        }
        var title = "Data version " + status.version + "; " + Object.keys(status.trials || {}).length +
          " trial(s); " + skipped + " unreadable file(s) skipped";
        return [parts.join(" · "), cls, title];
      }
    }
  });
})();
