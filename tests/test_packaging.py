"""Prompts, problems and golden kernels are found from an installed wheel, not only from a checkout."""

import pytest
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import os
from evaluator.wire.assets import asset_dir, golden_files
from evaluator.wire.problem import load_problem
from harness.generation.prompts import render_prompt
problem = load_problem("gemm_scale_bn")
assert str(problem.folder).startswith(os.environ["PROBE_SITE"]), problem.folder  # not the checkout
assert [p.stem for p in golden_files()] == ["fused_strict", "fused_tf32"]
messages = render_prompt(problem, "fusion")
assert any("class Model" in m.content for m in messages)
print("ok", asset_dir("prompts"))
"""


def copy_project(dest: Path) -> Path:
    """The files a wheel is built from, copied: setuptools writes build/ and *.egg-info into the
    folder it builds, which must not be the checkout."""
    skip = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.egg-info", "build", "dist")
    dest.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, dest / name)
    for folder in ("harness", "evaluator", "prompts", "reference", "candidates/golden"):
        shutil.copytree(ROOT / folder, dest / folder, ignore=skip)
    return dest


@pytest.mark.slow  # builds and installs a wheel
def test_an_installed_wheel_carries_the_data_folders(tmp_path):
    source, wheel_dir, site = tmp_path / "source", tmp_path / "wheel", tmp_path / "site"
    copy_project(source)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                            "--no-cache-dir", "-w", str(wheel_dir), str(source)], capture_output=True, text=True,
                           timeout=300, cwd=tmp_path)
    assert built.returncode == 0, built.stderr
    [wheel] = wheel_dir.glob("*.whl")
    zipfile.ZipFile(wheel).extractall(site)
    env = {**os.environ, "PYTHONPATH": str(site), "PROBE_SITE": str(site)}
    result = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok") and str(site) in result.stdout
