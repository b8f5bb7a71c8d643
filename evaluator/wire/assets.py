"""Where the data folders (prompts/, reference/, candidates/) live.

In a checkout (or an editable install) they sit beside the packages; an installed wheel
carries them as the `kernelharness_assets` package (see pyproject.toml).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

ASSET_FOLDERS = ("prompts", "reference", "candidates")


def asset_dir(name: str) -> Path:
    """The folder `name` (one of ASSET_FOLDERS) from the checkout, else from the wheel."""
    if name not in ASSET_FOLDERS:
        raise ValueError(f"unknown asset folder {name!r}; expected one of {ASSET_FOLDERS}")
    checkout = Path(__file__).resolve().parents[2] / name
    if checkout.is_dir():
        return checkout
    spec = importlib.util.find_spec(f"kernelharness_assets.{name}")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"cannot find the {name}/ folder (checkout or installed wheel)")
    return Path(next(iter(spec.submodule_search_locations)))


def golden_files() -> list[Path]:
    """The committed golden candidates: `candidates/golden/*.py`, except helpers named `_*.py`."""
    try:
        folder = asset_dir("candidates") / "golden"
    except FileNotFoundError:
        return []
    return sorted(p for p in folder.glob("*.py") if not p.name.startswith("_"))
