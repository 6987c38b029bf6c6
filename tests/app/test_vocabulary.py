"""The GUI speaks the words of comgra_like.vocabulary instead of keeping its own lists."""

from __future__ import annotations

import ast
from pathlib import Path

from comgra_like.app import figures
from comgra_like.app import selection as sel

from comgra_like import vocabulary as vocab

APP = Path(__file__).resolve().parents[2] / "app"


def test_no_list_of_vocabulary_words_and_no_gradient_prefix_in_the_gui_sources():
    """A tuple, list, set or dict that spells out three or more statistics, aggregations or
    kinds is a second copy of the vocabulary; so is a literal "gradient:" prefix."""
    words = {
        "statistics": set(vocab.ALL_STATISTICS),
        "aggregations": set(vocab.AGGREGATIONS),
        "kinds": set(vocab.KINDS),
    }
    found = []
    for path in sorted(APP.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            is_text = isinstance(node, ast.Constant) and isinstance(node.value, str)
            if is_text and node.value.startswith(vocab.GRADIENT_PREFIX):
                found.append(f"{path.name}:{node.lineno}: {node.value!r}")
            if isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict)):
                items = node.keys if isinstance(node, ast.Dict) else node.elts
                spelled = {i.value for i in items if isinstance(i, ast.Constant)}
                for name, vocabulary_words in words.items():
                    if len(spelled & vocabulary_words) >= 3:
                        found.append(f"{path.name}:{node.lineno}: a list of {name}")
    assert found == []


def test_labels_and_options_follow_the_vocabulary():
    rows = figures.statistics_rows({name: 1.0 for name in vocab.ALL_STATISTICS})
    assert [(name, label) for name, label, _ in rows] == list(vocab.STATISTIC_LABELS.items())
    assert set(sel.SERIES_STATISTICS) == set(vocab.ALL_STATISTICS) - {"numel"}
    gradient = vocab.gradient_type("main_loss")
    assert sel.option_label("recording_type", gradient) == "gradient (main_loss)"
    ordered = sorted([vocab.UPDATE, gradient, vocab.FORWARD], key=sel.recording_type_sort_key)
    assert ordered == [vocab.FORWARD, gradient, vocab.UPDATE]
