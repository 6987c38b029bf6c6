/* comgra-like GUI: keyboard navigation of the dependency graph, the highlight of a
   clicked node (drawn here, before the server answers) and the live badge.
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


  // --- the highlight of a clicked node ------------------------------------------------
  // A port of app/graph_highlight.py's compute_highlight/highlight_updates (keep them in
  // step; tests/browser compares both on every node and role). The figure carries what it
  // needs in layout.meta.highlight (graph_highlight.client_highlight_data).

  var graphIndexes = new WeakMap();  // layout.meta.highlight -> its index (per figure)

  function graphIndex(figure) {
    var data = figure && figure.layout && figure.layout.meta && figure.layout.meta.highlight;
    if (!data || data.version !== 1) {
      return null;
    }
    var index = graphIndexes.get(data);
    if (index) {
      return index;
    }
    var traces = data.traces, names = [], number = new Map(), points = [], positions = [];
    for (var t = 0; t < traces.node_traces; t++) {
      var trace = figure.data[traces.first_node + t] || {};
      var custom = trace.customdata || [];
      for (var p = 0; p < custom.length; p++) {
        number.set(custom[p], names.length);
        names.push(custom[p]);
        points.push([t, p]);
        positions.push([trace.x[p], trace.y[p]]);
      }
    }
    var edges = [], incoming = [], outgoing = [], i;
    for (i = 0; i < names.length; i++) {
      incoming.push([]);
      outgoing.push([]);
    }
    for (i = 0; i + 3 < data.edges.length; i += 4) {
      var k = edges.length;
      edges.push(data.edges.slice(i, i + 4));
      outgoing[data.edges[i]].push(k);
      incoming[data.edges[i + 1]].push(k);
    }
    var drawn = [], drawnOf = new Map();
    for (i = 0; i + 1 < data.drawn.length; i += 2) {
      drawnOf.set(data.drawn[i] + ">" + data.drawn[i + 1], drawn.length);
      drawn.push([data.drawn[i], data.drawn[i + 1]]);
    }
    var arrowOf = new Map();
    data.arrows.forEach(function (k, position) { arrowOf.set(k, position); });
    index = {data: data, names: names, number: number, points: points, positions: positions,
             edges: edges, incoming: incoming, outgoing: outgoing, drawn: drawn,
             drawnOf: drawnOf, arrowOf: arrowOf};
    graphIndexes.set(data, index);
    return index;
  }

  function computeHighlight(index, node, role) {
    // node: a node number; role: a role name or null. What compute_highlight returns,
    // as {node, role, upstream, downstream (Sets of numbers), thick, thin (Sets of drawn
    // edge numbers)}.
    var edges = index.edges, roles = index.data.roles;
    var nodeRoles = new Set();
    index.incoming[node].forEach(function (k) { nodeRoles.add(roles[edges[k][3]]); });
    index.outgoing[node].forEach(function (k) { nodeRoles.add(roles[edges[k][2]]); });
    if (role === null || role === undefined || !nodeRoles.has(role)) {
      role = null;
    }
    function walk(start, upstream) {
      var adjacency = upstream ? index.incoming : index.outgoing, end = upstream ? 0 : 1;
      var reached = new Set(), used = new Set(), queue = start.slice(), head = 0;
      while (head < queue.length) {
        var k = queue[head++];
        if (used.has(k)) {
          continue;
        }
        used.add(k);
        var other = edges[k][end];
        if (other !== node && !reached.has(other)) {
          reached.add(other);
          Array.prototype.push.apply(queue, adjacency[other]);
        }
      }
      return {reached: reached, used: used};
    }
    var ins = index.incoming[node], outs = index.outgoing[node];
    var up = walk(ins, true), down = walk(outs, false), thickIds = new Set();
    if (role === null) {
      up.used.forEach(function (k) { thickIds.add(k); });
      down.used.forEach(function (k) { thickIds.add(k); });
    } else {
      walk(ins.filter(function (k) { return roles[edges[k][3]] === role; }), true)
        .used.forEach(function (k) { thickIds.add(k); });
      walk(outs.filter(function (k) { return roles[edges[k][2]] === role; }), false)
        .used.forEach(function (k) { thickIds.add(k); });
    }
    function drawnOf(k) { return index.drawnOf.get(edges[k][0] + ">" + edges[k][1]); }
    var thick = new Set(), thin = new Set();
    thickIds.forEach(function (k) { thick.add(drawnOf(k)); });
    [up.used, down.used].forEach(function (used) {
      used.forEach(function (k) {
        var d = drawnOf(k);
        if (!thickIds.has(k) && !thick.has(d)) {
          thin.add(d);
        }
      });
    });
    return {node: node, role: role, upstream: up.reached, downstream: down.reached,
            thick: thick, thin: thin};
  }

  function polylines(index, pairs) {
    // graph_model.polylines: x and y of the drawn edges ``pairs`` (numbers, in drawn
    // order), an edge that starts where the previous one ended continuing its polyline.
    var unused = new Map(), done = new Set(), xs = [], ys = [];
    pairs.forEach(function (k) {
      var source = index.drawn[k][0];
      if (!unused.has(source)) {
        unused.set(source, {list: [], head: 0});
      }
      unused.get(source).list.push(k);
    });
    pairs.forEach(function (first) {
      if (done.has(first)) {
        return;
      }
      var pair = first, skip = 0;
      while (pair !== null) {
        done.add(pair);
        var path = index.data.paths[pair];
        for (var i = 2 * skip; i + 1 < path.length; i += 2) {
          xs.push(path[i]);
          ys.push(path[i + 1]);
        }
        skip = 1;
        var following = unused.get(index.drawn[pair][1]);
        pair = null;
        while (following && following.head < following.list.length) {
          var candidate = following.list[following.head++];
          if (!done.has(candidate)) {
            pair = candidate;
            break;
          }
        }
      }
      xs.push(null);
      ys.push(null);
    });
    return [xs, ys];
  }

  function selection(points, size) {
    return points.length === size && size ? null : points;
  }

  function highlightUpdates(figure, name, role) {
    // [trace, property path, value] triples, as graph_highlight.highlight_updates (null for
    // a figure without highlight data).
    var index = graphIndex(figure);
    if (!index) {
      return null;
    }
    var traces = index.data.traces, t;
    var node = index.number.has(name) ? index.number.get(name) : null;
    var updates;
    if (node === null) {
      updates = [
        [traces.edges, ["line", "color"], index.data.edge_color],
        [traces.other_role_edges, ["x"], []],
        [traces.other_role_edges, ["y"], []],
        [traces.selected_edges, ["x"], []],
        [traces.selected_edges, ["y"], []],
        [traces.arrows, ["selectedpoints"], null]
      ];
      for (t = 0; t < traces.node_traces; t++) {
        updates.push([traces.first_node + t, ["selectedpoints"], null]);
      }
      updates.push([traces.selection, ["x"], []], [traces.selection, ["y"], []]);
      return updates;
    }
    var h = computeHighlight(index, node, role);
    var thick = [], thin = [], arrows = [];
    for (var k = 0; k < index.drawn.length; k++) {
      if (h.thick.has(k)) {
        thick.push(k);
      } else if (h.thin.has(k)) {
        thin.push(k);
      } else {
        continue;
      }
      if (index.arrowOf.has(k)) {
        arrows.push(2 * index.arrowOf.get(k) + 1);
      }
    }
    var thickXY = polylines(index, thick), thinXY = polylines(index, thin);
    updates = [
      [traces.edges, ["line", "color"], index.data.dimmed_edge_color],
      [traces.other_role_edges, ["x"], thinXY[0]],
      [traces.other_role_edges, ["y"], thinXY[1]],
      [traces.selected_edges, ["x"], thickXY[0]],
      [traces.selected_edges, ["y"], thickXY[1]],
      [traces.arrows, ["selectedpoints"], selection(arrows, index.data.arrows.length)]
    ];
    var lit = [];
    for (t = 0; t < traces.node_traces; t++) {
      lit.push([]);
    }
    var size = lit.map(function () { return 0; });
    index.points.forEach(function (point, n) {
      size[point[0]]++;
      if (n === node || h.upstream.has(n) || h.downstream.has(n)) {
        lit[point[0]].push(point[1]);
      }
    });
    for (t = 0; t < traces.node_traces; t++) {
      updates.push([traces.first_node + t, ["selectedpoints"], selection(lit[t], size[t])]);
    }
    var position = index.positions[node];
    updates.push([traces.selection, ["x"], [position[0]]],
                 [traces.selection, ["y"], [position[1]]]);
    return updates;
  }

  function expectedRole(index, node, selection) {
    // The role the server's selection will most likely choose for a clicked node: the
    // one the user last wanted if the node has it, else its first (selection.relax; it
    // can differ when a role has no recorded data: the server's patch then corrects it).
    var roles = (index.data.node_roles[node] || []).map(function (r) {
      return index.data.roles[r];
    });
    var wanted = selection && selection.wanted ? selection.wanted.role : null;
    if (wanted !== null && wanted !== undefined && roles.indexOf(wanted) >= 0) {
      return wanted;
    }
    return roles.length ? roles[0] : null;
  }

  function graphClick(clickData, figure, selection, shown) {
    // Clientside callback: on a click on a node, highlight it at once (a Patch of the
    // figure) and note what is drawn (the graph-shown store), so that the server's
    // graph callback only sends a patch when its selection differs.
    var clientside = window.dash_clientside, noUpdate = clientside.no_update;
    var point = clickData && clickData.points && clickData.points[0];
    var name = point ? point.customdata : null;
    if (Array.isArray(name)) {
      name = name[0];
    }
    var index = graphIndex(figure);
    if (name === null || name === undefined || !index || !index.number.has(name)) {
      return [noUpdate, noUpdate];
    }
    var role = expectedRole(index, index.number.get(name), selection);
    var drawn = {hash: figure.layout.meta.graph_hash, node: name, role: role};
    if (shown && shown.hash === drawn.hash && shown.node === name && shown.role === role) {
      return [noUpdate, noUpdate];
    }
    var patch = new clientside.Patch();
    highlightUpdates(figure, name, role).forEach(function (update) {
      patch.assign(["data", update[0]].concat(update[1]), update[2]);
    });
    return [patch.build(), drawn];
  }

  window.dash_clientside = Object.assign({}, window.dash_clientside, {
    comgra: {
      graphClick: graphClick,
      highlightUpdates: highlightUpdates,
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
