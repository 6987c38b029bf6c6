"""A user's process serving row requests (issue 18), run as a real process by
tests/flow/test_row_requests.py and tests/browser/test_flow_rows.py: the conv net of
conv_net.py records one step whose flow input -> conv1 is above the bound
(``MAX_ENTRIES``: 1x6x6 -> 2x3x3 has 648 entries), so it is stored ``too_large``; then
``comgra_like.probe.serve`` answers edits and row requests with the same bound until
``MAX_PROBES`` probes and ``MAX_ROWS`` row requests were run (0: no limit).

Usage: ``python row_child.py ROOT GROUP TRIAL MAX_PROBES MAX_ROWS``
"""

from __future__ import annotations

import sys

from conv_net import serve_net

#: Above conv1 -> conv2 (324 entries), below input -> conv1 (648).
MAX_ENTRIES = 400


def main() -> int:
    root, group, trial = sys.argv[1], sys.argv[2], sys.argv[3]
    max_probes, max_rows = int(sys.argv[4]) or None, int(sys.argv[5]) or None
    served = serve_net(root, group, trial, max_probes=max_probes, max_rows=max_rows,
                       max_entries=MAX_ENTRIES)
    print(" ".join(served))
    return 0


if __name__ == "__main__":
    sys.exit(main())
