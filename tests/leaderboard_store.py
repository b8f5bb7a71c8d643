"""A result store filled by REAL evaluations on the CPU, shared by the leaderboard and report
tests (built once per test process: 3 timed evaluations, ~20 s on 2 idle cores):

- `harness eval --device cpu --size small --store S` on copies of CPU fixtures: a loose-only one (adds 1e-3 noise: correct at `loose`, not at `strict`), a wrong
  one, a syntax error, one whose forward raises, a hack the static checks reject (TF32 flag: judged
  `rejected` without running), and a
  "golden" kernel (a file under candidates/golden/ of the working folder);
- `harness run` against the local OpenAI-compatible test server (the script of
  tests/test_harness_run_http.py: 5 samples, a correct one after a 429, a truncated reply, a
  request timeout, a reply without code, a wrong candidate).
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from typer.testing import CliRunner

TESTS = Path(__file__).parent
sys.path.insert(0, str(TESTS))
from fake_openai_server import FakeOpenAIServer  # noqa: E402
from test_harness_run_http import enter_clean_workdir, run_args, script  # noqa: E402

from harness.cli.app import app  # noqa: E402

CPU = TESTS / "fixtures" / "candidates" / "cpu"
HACKS = TESTS / "fixtures" / "hacks" / "cpu"
NOISE_LINE = "        return (z - mean) * torch.rsqrt(var + self.bn.eps) * self.bn.weight + self.bn.bias\n"

# file in the working folder -> fixture it is copied from
EVAL_FILES = {
    "wrong_values.py": CPU / "wrong_values.py",
    "syntax_error.py": CPU / "syntax_error.py",
    "forward_raises.py": CPU / "forward_raises.py",
    "tf32_flag.py": HACKS / "tf32_flag.py",
}
EXPECTED_EVAL_STATUS = {
    "eval/noisy_loose.py": "correct", "eval/wrong_values.py": "incorrect",
    "eval/syntax_error.py": "parse_error", "eval/forward_raises.py": "runtime_error", "eval/tf32_flag.py": "rejected",
}
GOLDEN_NAME = "golden/ref_torch_ops"


@dataclass
class BuiltStore:
    path: Path
    workdir: Path
    run_id: str          # the `harness run` against the test server
    eval_output: str
    run_output: str


_BUILT: dict[str, BuiltStore] = {}


def noisy_source() -> str:
    """A candidate correct at loose (1e-2) but not at strict (1e-4): the output plus 1e-3 noise."""
    source = (CPU / "torch_ops_correct.py").read_text()
    assert NOISE_LINE in source
    return source.replace(NOISE_LINE, NOISE_LINE.replace("        return ", "        out = ")
                          + "        return out + 1e-3 * torch.randn_like(out)\n").replace(
        "EXPECT: status=correct", "Correct at loose only: adds 1e-3 noise.")


def build_store(tmp_path_factory: pytest.TempPathFactory) -> BuiltStore:
    if "store" in _BUILT:
        return _BUILT["store"]
    workdir = tmp_path_factory.mktemp("leaderboard")
    store = workdir / "results.sqlite"
    for name, src in EVAL_FILES.items():
        shutil.copy(src, workdir / name)
    (workdir / "noisy_loose.py").write_text(noisy_source())
    golden = workdir / "candidates" / "golden"
    golden.mkdir(parents=True)
    (golden / "ref_torch_ops.py").write_text("# a golden kernel for the leaderboard tests\n"
                                             + (CPU / "torch_ops_correct.py").read_text())
    files = [*EVAL_FILES, "noisy_loose.py", "candidates/golden/ref_torch_ops.py"]
    runner = CliRunner()
    with pytest.MonkeyPatch.context() as mp:
        enter_clean_workdir(mp, workdir)
        evaluated = runner.invoke(app, ["eval", "--device", "cpu", "--size", "small", "--ahead", "2", "--store", str(store),
                                        *files])
        assert evaluated.exit_code == 0, evaluated.output
        with FakeOpenAIServer(script) as server:
            ran = runner.invoke(app, run_args(server.url, "--store", str(store)))
        assert ran.exit_code == 0, ran.output
    from evaluator.wire.records import Verdict
    from harness.core.store import Store

    with Store(store) as db:
        (run,) = [r for r in db.list_runs() if r.mode == "generate"]
        # These boards are about rendering and the ranking rules. Whether a loaded 2-core machine timed these
        # toy candidates steadily is chance (a fast one is often `shaky_timing` at `small`): left out here.
        with db.db:
            for key, record in db.db.execute("SELECT key, record FROM verdicts").fetchall():
                verdict = Verdict.model_validate_json(record)
                steady = [f for f in verdict.flags if f.name != "shaky_timing"]
                if len(steady) != len(verdict.flags):
                    db.db.execute("UPDATE verdicts SET record = ? WHERE key = ?",
                                  (verdict.model_copy(update={"flags": steady}).model_dump_json(), key))
    built = BuiltStore(path=store, workdir=workdir, run_id=run.id, eval_output=evaluated.output, run_output=ran.output)
    _BUILT["store"] = built
    return built


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")

