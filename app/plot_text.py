"""User text inside plotly figures: shown as the text it is, never as markup.

plotly renders a subset of HTML in every text of a figure (trace names and the legend,
hover text and hover templates, titles, axis titles, annotations, text labels): ``<a
href=…>`` becomes a live link, ``<b>`` bold, and a hover template substitutes ``%{…}``.
Names in a recording come from whoever wrote it, so every user string goes through
:func:`plot_text` before it enters a figure. Dash components (``html.*``, dropdown
labels) escape by themselves and need nothing.
"""

from __future__ import annotations

from typing import Any

__all__ = ["plot_text"]

# plotly turns entities back into characters after it has parsed its tags, so the
# entities show literally; "%" as "&#37;" leaves no "%{" for a hover template to fill in.
_ENTITIES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "%": "&#37;"})


def plot_text(value: Any) -> str:
    """``value`` as text for any text field of a plotly figure (hover templates included)."""
    return str(value).translate(_ENTITIES)
