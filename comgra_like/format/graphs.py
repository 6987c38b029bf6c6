"""Graph files (``graphs/<sha256>.json``): named by a hash of their canonical JSON.

Equal structures get equal names in every process (the recorder names a structure, the
writer stores it once under that name, readers find it by the name in the steps table).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from .layout import GRAPH_RE, graph_name


def canonical_json(structure: Any) -> bytes:
    """Sorted keys, no spaces: the bytes the name is a hash of."""
    return json.dumps(structure, sort_keys=True, separators=(",", ":")).encode("utf-8")


def canonical_hash(structure: Any) -> str:
    """sha256 of the canonical JSON, as 64 hexadecimal digits: the file's name."""
    return hashlib.sha256(canonical_json(structure)).hexdigest()


def is_graph_digest(digest: str) -> bool:
    """Whether ``digest`` can name a graph file (and nothing outside ``graphs/``)."""
    return isinstance(digest, str) and GRAPH_RE.match(graph_name(digest)) is not None
