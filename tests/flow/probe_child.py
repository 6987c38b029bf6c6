"""A user's process serving probes (issue 18), run as a real process by
tests/flow/test_probe_loop.py and tests/browser/test_flow.py: the conv net of conv_net.py,
trained under the ComgraRecorder, records one step with its flows, then
``comgra_like.probe.serve`` runs every edited input the test submits (forward and
backward under the recorder) until ``MAX_PROBES`` were run.

Usage: ``python probe_child.py ROOT GROUP TRIAL MAX_PROBES``
"""

from __future__ import annotations

import sys

from conv_net import serve_net


def main() -> int:
    root, group, trial, max_probes = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    print(" ".join(serve_net(root, group, trial, max_probes=max_probes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
