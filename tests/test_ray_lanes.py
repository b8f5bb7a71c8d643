"""`executor="ray"`: lanes as Ray actors on a local Ray instance, judging CPU fixtures. The verdicts
must be the local executor's, and a candidate that kills its executor costs only itself."""

import pytest

from conftest import FIXTURES, expectation
from evaluator.wire.records import Status
from evaluator.parent.sandbox import CandidateFile, EvalOptions, Evaluator

ray = pytest.importorskip("ray")

CPU = FIXTURES / "candidates" / "cpu"
NAMES = ["torch_ops_correct", "os_exit_in_forward", "wrong_values", "forward_raises", "nan_output", "torch_ops_correct"]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


@pytest.mark.slow
def test_ray_lanes_give_the_local_verdicts_and_a_crash_costs_only_its_candidate(tmp_path, local_ray):
    files = [CandidateFile(name=f"{i}-{n}", path=CPU / f"{n}.py") for i, n in enumerate(NAMES)]
    settings = dict(device="cpu", size="small", run_timeout_s=60, timing_budget_s=0.2, baselines=["eager"],
                    run_rejected=True)
    evaluator = Evaluator(EvalOptions(**settings, executor="ray", lanes=2, log_root=tmp_path / "ray"))
    remote = list(evaluator.evaluate_all(files))
    local = list(Evaluator(EvalOptions(**settings, log_root=tmp_path / "local")).evaluate_all(files))
    expected = [Status(expectation(CPU / f"{n}.py")["status"]) for n in NAMES]
    assert [v.status for v in remote] == [v.status for v in local] == expected, [v.error for v in remote]
    assert [v.candidate for v in remote] == [f.name for f in files]
    # the flags of what was found, not of how steady two timings on a loaded 2-core machine were
    measured = {"timing_mismatch", "shaky_timing"}
    assert [sorted(f.name for f in v.flags if f.name not in measured) for v in remote] == \
        [sorted(f.name for f in v.flags if f.name not in measured) for v in local]
    assert remote[0].runtime_ms > 0 and remote[-1].runtime_ms > 0  # the lanes went on after the crash
    assert all(v.judge == local[0].judge for v in remote)
    assert remote[0].log_dir and (tmp_path / "ray").exists()  # settled and logged by the parent
    assert {r.batch for r in evaluator.rounds} and all(r.baselines for r in evaluator.rounds)
