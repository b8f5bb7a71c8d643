"""Prompts, problems and golden kernels are found from an installed wheel, not only from a checkout."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import os
from evaluator.assets import asset_dir, golden_files
from evaluator.problem import load_problem
from harness.prompts import render_prompt
problem = load_problem("gemm_scale_bn")
assert str(problem.folder).startswith(os.environ["PROBE_SITE"]), problem.folder  # not the checkout
assert [p.stem for p in golden_files()] == ["fused_strict", "fused_tf32"]
messages = render_prompt(problem, "fusion")
assert any("class Model" in m.content for m in messages)
print("ok", asset_dir("prompts"))
"""


def test_an_installed_wheel_carries_the_data_folders(tmp_path):
    wheel_dir, site = tmp_path / "wheel", tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(wheel_dir), str(ROOT)], check=True, capture_output=True, timeout=300)
    [wheel] = wheel_dir.glob("*.whl")
    zipfile.ZipFile(wheel).extractall(site)
    env = {**os.environ, "PYTHONPATH": str(site), "PROBE_SITE": str(site)}
    result = subprocess.run([sys.executable, "-c", PROBE], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok") and str(site) in result.stdout
