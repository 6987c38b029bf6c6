"""The page registry (comgra_like.app.pages): what create_app builds its pages from."""

from __future__ import annotations

from typing import Any

from comgra_like.app import create_app, ids
from comgra_like.app.pages import PAGES


def _components(component: Any) -> list[Any]:
    """A component and everything under it."""
    found = [component]
    children = getattr(component, "children", None)
    for child in children if isinstance(children, (list, tuple)) else [children]:
        if child is not None and not isinstance(child, (str, int, float)):
            found += _components(child)
    return found


def _ids(component: Any) -> list[str]:
    """The string ids of a component tree (pattern-matching dict ids left out)."""
    return [c.id for c in _components(component) if isinstance(getattr(c, "id", None), str)]


def test_pages_have_distinct_paths_and_names_and_pure_layouts():
    assert len({p.path for p in PAGES}) == len({p.name for p in PAGES}) == len(PAGES)
    assert PAGES[0].path == "/"
    seen = []
    for page in PAGES:
        # no app and no data needed: the router calls it whenever the page is shown
        first, second = page.layout(), page.layout()
        assert first is not second and _ids(first) == _ids(second)
        seen += _ids(first)
    assert len(seen) == len(set(seen)), "two pages share a component id"


def _nav(app: Any) -> list[tuple[str, str]]:
    nav = next(c for c in _components(app.layout) if getattr(c, "id", None) == ids.NAV)
    return [(link.children, link.href) for link in nav.children]


def test_create_app_shows_the_registered_pages_in_order(tiny_group, tmp_path):
    plugin = tmp_path / "plugin.py"
    plugin.write_text("def create_visualization(ctx):\n    return 'hello'\n")
    without = create_app(tiny_group)
    with_plugin = create_app(tiny_group, visualization_file=plugin)
    assert _nav(with_plugin) == [(p.name, p.path) for p in PAGES]
    assert _nav(without) == [(p.name, p.path) for p in PAGES if not p.needs_plugin]
    # a page that is not shown adds no callbacks
    assert len(with_plugin.callback_map) > len(without.callback_map)
