"""``comgra``'s malloc settings (app/cli.py bound_allocators): memory a large array
leaves behind goes back to the system (the GUI's RSS stays near what its cache holds)."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import subprocess
import sys

import pytest

PROBE = r"""
import ctypes, ctypes.util, json, sys
from comgra_like.app.cli import bound_allocators

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in ("arena", "ordblks", "smblks", "hblks",
                "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.mallinfo2.restype = MallInfo2
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
applied = bound_allocators() if sys.argv[1] == "bound" else None
size = 4 << 20
libc.free(libc.malloc(size))  # glibc then serves blocks of this size from its heap
before = libc.mallinfo2().hblks
block = libc.malloc(size)
print(json.dumps({"applied": applied, "mapped": libc.mallinfo2().hblks - before}))
libc.free(block)
"""


def _glibc() -> bool:
    name = ctypes.util.find_library("c")
    return sys.platform.startswith("linux") and bool(name) and hasattr(
        ctypes.CDLL(name), "mallinfo2")


@pytest.mark.skipif(not _glibc(), reason="glibc's malloc only")
def test_large_blocks_stay_mapped_so_that_freeing_them_returns_the_memory():
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}

    def run(mode: str) -> dict:
        out = subprocess.run([sys.executable, "-c", PROBE, mode], check=True,
                             capture_output=True, text=True, env=env)
        return json.loads(out.stdout.strip().splitlines()[-1])

    default, bound = run("default"), run("bound")
    # by default the first free raised the mmap threshold: the block came from the heap
    # (which keeps it when freed); with comgra's settings it is mapped again
    assert default["mapped"] == 0
    assert bound == {"applied": True, "mapped": 1}
