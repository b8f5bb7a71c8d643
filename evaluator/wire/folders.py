"""Removing a folder a candidate could have written into, whatever it left there.

`shutil.rmtree` recurses once per level (before Python 3.13): a candidate that nests folders past the recursion limit
in its working folder made it raise RecursionError out of the referee's clean-up, `ignore_errors` or not, and the
verdict already judged was lost for "the referee failed" (fixture `hacks/cpu/deep_folders.py`). `rm -rf` walks any
depth without recursing in its caller and follows no symbolic link.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

REMOVE_TIMEOUT_S = 120.0  # a folder of millions of files: what is left after it stays, the caller goes on


def remove_tree(folder: Path | str) -> None:
    """`folder` and everything under it removed, at any depth; never raises (what cannot be removed stays)."""
    try:
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(folder)], stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=REMOVE_TIMEOUT_S, check=False)
        return
    except (OSError, subprocess.SubprocessError):  # no `rm` here (or it hung): Python's own, bounded by its depth
        pass
    try:
        shutil.rmtree(folder, ignore_errors=True)
    except Exception:  # RecursionError past the recursion limit
        pass
