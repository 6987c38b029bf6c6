"""Node labels and hover text of the dependency-graph figure.

Pure functions: :func:`node_labels` (the part of each name that tells the node apart,
wrapped onto lines), :func:`label_style` (the font, marker size, label position and
labels that fit the room a node has at the initial zoom) and :func:`hover_text`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from .graph_layout import GraphLayout
from .graph_model import GraphNodeLike
from .plot_text import plot_text

__all__ = [
    "MAX_LABELED_NODES",
    "X_PADDING",
    "Y_PADDING",
    "LabelStyle",
    "hover_text",
    "label_style",
    "node_labels",
]

X_PADDING = 0.6  # axis range beyond the outermost nodes, in layers
Y_PADDING = 0.8  # in node spacings
_MIN_FONT = 7  # px: smaller labels cannot be read
_MIN_LABEL_CHARS = 4  # a label must fit at least this many characters ("…abc")
_MAX_LABEL_CHARS = 28  # characters a label's line has at most
_MAX_LABEL_LINES = 3
_CHAR_WIDTH = 0.6  # the mean width of a character of the UI font, in font sizes
_LINE_HEIGHT = 1.3  # plotly's distance between lines of a text, in font sizes
_MARGIN_HEIGHT = 45  # px of the figure's height outside the plot: margins, legend row
_MARGIN_WIDTH = 16
# Every highlight redraws every label (plotly re-lays out all text of the plot on each
# data change, ~0.1 ms per label in headless Chromium), so a graph with more nodes never
# gets labels, however much room it has; the hover text names every node.
MAX_LABELED_NODES = 400


# A label may start right after one of these: module paths ("a.b", "a/b") and comgra's
# "<module>__<tensor>" names.
_BOUNDARY = re.compile(r"(?:[./]+|_{2,})(?=[^./])")
# The suffix the recorder gives a node imported from another iteration: memory@initial, h@3
_IMPORT_SUFFIX = re.compile(r"@(?:initial|\d+)$")
# A part longer than a line is broken after a "_" or "-"
_SOFT_PARTS = re.compile(r"[^_-]*(?:[_-]+|$)")


def node_labels(
    names: Iterable[str], max_chars: int = 20, max_lines: int = 2
) -> dict[str, list[str]]:
    """The label of each node, as lines of at most ``max_chars`` characters.

    A label is the node's name less the longest prefix, ending in a ``.``, ``/`` or
    ``__``, that another name starts with too, as long as no other name ends with the
    rest: the module path the names share (``root_module.``) goes, what tells the nodes
    apart stays (``subnet_mem__hidden_state``, not ``hidden_state``, which three nodes
    end with). An import's ``@<iteration>`` stays after the label of its node. Labels
    are wrapped at those boundaries (a part longer than a line after a ``_`` or ``-``,
    else where it must), in lines as even as their number allows. A label longer than
    ``max_lines`` lines keeps its first line (what tells it apart) and its last lines
    (the tensor's own name), with ``…`` for what is left out; on a single line its
    middle is cut out.
    """
    max_chars = max(3, int(max_chars))
    max_lines = max(1, int(max_lines))
    return {name: _wrap(label, max_chars, max_lines) for name, label in _distinct(names).items()}


def _distinct(names: Iterable[str]) -> dict[str, str]:
    """Each name's label on one line (see :func:`node_labels`)."""
    split = {}
    for name in names:
        match = _IMPORT_SUFFIX.search(name)
        cut = match.start() if match and match.start() > 0 else len(name)
        split[name] = (name[:cut], name[cut:])
    endings: dict[str, int] = {}
    prefixes: dict[str, int] = {}
    starts = {}
    for base in {base for base, _ in split.values()}:
        starts[base] = [0, *(m.end() for m in _BOUNDARY.finditer(base))]
        for start in starts[base]:
            endings[base[start:]] = endings.get(base[start:], 0) + 1
            prefixes[base[:start]] = prefixes.get(base[:start], 0) + 1
    labels = {}
    for name, (base, suffix) in split.items():
        # only a prefix another name shares is dropped: a module path, not a "/" that
        # happens to be in a name ("<b>x</b>", "loss/grad ratio")
        unique = [base[i:] for i in starts[base]
                  if endings[base[i:]] == 1 and (i == 0 or prefixes[base[:i]] > 1)]
        # the last unique ending is the shortest; none is unique when the whole name is
        # another name's ending ("weight" and "layer.weight"): then the whole name
        labels[name] = (unique[-1] if unique else base) + suffix
    return labels


def _wrap(label: str, max_chars: int, max_lines: int) -> list[str]:
    pieces = _pieces(label, max_chars)
    lines = _fill(pieces, max_chars)
    if len(lines) <= max_lines:
        # the narrowest lines that need no more of them: "subnet_mem." over
        # "layer_in.bias" rather than "subnet_mem.layer_in." over "bias"
        start = max(-(-len(label) // len(lines)), *map(len, pieces))
        for width in range(start, max_chars):
            narrower = _fill(pieces, width)
            if len(narrower) == len(lines):
                return narrower
        return lines
    if max_lines == 1:
        head = (max_chars - 1) // 2
        return [label[:head] + "…" + label[len(label) - (max_chars - 1 - head):]]
    first = lines[0] if len(lines[0]) < max_chars else lines[0][:-1]
    return [first + "…", *lines[len(lines) - (max_lines - 1):]]


def _pieces(label: str, max_chars: int) -> list[str]:
    """``label`` cut after each boundary; a part longer than a line also after each ``_``
    or ``-``, and what is still too long every ``max_chars`` characters."""
    cuts = [m.end() for m in _BOUNDARY.finditer(label)]
    pieces = []
    for a, b in zip([0, *cuts], [*cuts, len(label)]):
        part = label[a:b]
        if len(part) <= max_chars:
            pieces.append(part)
            continue
        for soft in _SOFT_PARTS.findall(part):
            pieces += [soft[i:i + max_chars] for i in range(0, len(soft), max_chars)]
    return pieces


def _fill(pieces: list[str], max_chars: int) -> list[str]:
    """The pieces in lines of at most ``max_chars`` characters, as many a line as fit."""
    lines: list[str] = []
    line = ""
    for piece in pieces:
        if line and len(line) + len(piece) > max_chars:
            lines.append(line)
            line = ""
        line += piece
    if line:
        lines.append(line)
    return lines


def _lines(label: str, max_chars: int) -> int:
    """How many lines ``label`` takes, wrapped at ``max_chars`` characters."""
    return len(_fill(_pieces(label, max_chars), max_chars))


@dataclass(frozen=True)
class LabelStyle:
    font: int
    marker: int
    position: str
    labels: Mapping[str, list[str]] | None  # None: the nodes have no labels


def label_style(
    layout: GraphLayout, width_px: int, height_px: int, names: Sequence[str] = ()
) -> LabelStyle:
    """Font size, marker size, text position and the labels for the initial zoom.

    The densest column and the width of a layer decide how much room a label has:
    above its marker (up to the next node) or beside it (up to the next layer). The
    largest font at which every label (:func:`node_labels`) fits whole in one of the two
    places wins, above the marker before beside it; if none fits, the font that lets ~10
    characters fit a layer's width, with the labels shortened. Labels are left out when
    a node's row is lower than the smallest font (7 px: zooming in helps then), a layer
    narrower than ``_MIN_LABEL_CHARS`` characters of it, or above ``MAX_LABELED_NODES``
    nodes.
    """
    ys = [p[1] for p in layout.positions.values()] or [0.0]
    # the plot area: the figure less its margins and the legend's row
    height_px, width_px = height_px - _MARGIN_HEIGHT, width_px - _MARGIN_WIDTH
    px_per_unit = height_px / (max(ys) - min(ys) + 2 * Y_PADDING)
    px_per_layer = width_px / (max(layout.num_layers - 1, 0) + 2 * X_PADDING)
    marker = int(min(16, max(6, px_per_unit * 0.45)))
    above = px_per_unit - marker - 2
    # (position, width, height) of the room a label has
    places = [("middle right", px_per_layer * 0.8 - marker, px_per_unit - 2)]
    if above >= 8:
        places.insert(0, ("top center", px_per_layer * 0.9, above))
    position, room, font_room = places[0]
    labels_fit = (
        len(names) <= MAX_LABELED_NODES
        and font_room >= _MIN_FONT
        and room >= _CHAR_WIDTH * _MIN_FONT * _MIN_LABEL_CHARS
    )
    if not labels_fit:
        return LabelStyle(int(_MIN_FONT), marker, position, None)

    def fit(font: int, width: float, height: float) -> tuple[int, int]:
        chars = int(min(_MAX_LABEL_CHARS, width / (_CHAR_WIDTH * font)))
        lines = int(min(_MAX_LABEL_LINES, height / (_LINE_HEIGHT * font)))
        return chars, lines

    texts = _distinct(names)
    longest = max(map(len, texts.values()), default=0)
    for font in range(12, _MIN_FONT - 1, -1):
        for place, width, height in places:
            chars, lines = fit(font, width, height)
            if chars < _MIN_LABEL_CHARS or lines < 1 or longest > chars * lines:
                continue
            if all(_lines(text, chars) <= lines for text in texts.values()):
                labels = {name: _wrap(text, chars, lines) for name, text in texts.items()}
                return LabelStyle(font, marker, place, labels)
    # as large as the node's height allows, but small enough for ~10 characters to fit
    # the width of a layer
    font = int(min(12, max(_MIN_FONT, min(font_room, room / (_CHAR_WIDTH * 10)))))
    chars, lines = fit(font, room, font_room)
    return LabelStyle(font, marker, position, node_labels(names, chars, max(1, lines)))


def hover_text(node: GraphNodeLike) -> str:
    lines = [f"<b>{plot_text(node.name)}</b>"]
    kind = node.kind
    if node.is_import:
        kind += f" · imported from iteration {node.iteration}"
    lines.append(f"kind: {plot_text(kind)}")
    if node.module_group:
        lines.append(f"module: {plot_text(node.module_group)}")
    for role in node.roles:
        shape = node.shapes.get(role)
        if shape is None:
            shape_text = "shape unknown"
        else:
            shape_text = "×".join(str(d) for d in shape) if len(shape) else "scalar"
        tensor = node.tensor_names.get(role, "")
        detail = f"{tensor} " if tensor and tensor != node.name else ""
        lines.append(f"role {plot_text(role)}: {plot_text(detail)}[{shape_text}]")
    return "<br>".join(lines)
