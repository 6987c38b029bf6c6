"""The value views' pure pieces: whether the selection names a tensor, the header line
and the statistics table."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dash import html

from ... import figures
from ... import selection as sel


def is_complete(current: Mapping[str, Any] | None) -> bool:
    return bool(current) and all(current.get(f) is not None for f in sel.CHAIN)


def value_header(
    current: Mapping[str, Any], type_of_execution: str | None, kind: str | None, shape: Any
) -> list:
    """The line above the value views: what exactly is shown."""
    items = [
        ("trial", current.get("trial")),
        ("step", current.get("training_step")),
        ("iteration", current.get("iteration")),
        ("type", type_of_execution),
        ("node", current.get("node")),
        ("role", current.get("role")),
        ("kind", kind),
        ("shape", figures.format_shape(shape) if shape is not None else None),
        ("recording", sel.option_label("recording_type", current.get("recording_type") or "")),
        ("of", sel.option_label("aggregation", current.get("aggregation") or "")),
    ]
    return [
        html.Span(
            [
                html.Span(label, className="hdr-label"),
                " ",
                html.Span(str(value), className="hdr-value"),
            ],
            className="hdr-item",
            **{"data-label": label},
        )
        for label, value in items
        if value not in (None, "")
    ]


def statistics_table(stats: Mapping[str, float]) -> html.Table:
    rows = figures.statistics_rows(stats)
    return html.Table(
        html.Tbody(
            [
                html.Tr([html.Th(label, scope="row"), html.Td(value)], **{"data-statistic": name})
                for name, label, value in rows
            ]
        ),
        className="table table-sm stats-table mb-0",
    )


def message(text: str) -> html.Div:
    return html.Div(text, className="text-muted small p-2")

