import re
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


def cuda_visible() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if cuda_visible():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none visible)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def expectation(path: Path) -> dict[str, str]:
    """The `EXPECT: status=... flag=...` line of a fixture's docstring."""
    match = re.search(r"^EXPECT:(.*)$", path.read_text(), re.MULTILINE)
    assert match, f"{path} has no EXPECT line"
    return dict(part.split("=", 1) for part in match.group(1).replace('"""', " ").split())
