"""`executor="ray"` on a cluster of two machines (ray.cluster_utils.Cluster: two nodes of this one,
CPU only): builds are Ray tasks spread over both, each build's folder reaches the lane that judges it,
and the verdicts are the local executor's, each saying where it was built and judged."""

import pytest

from conftest import FIXTURES, expectation
from evaluator.parent.sandbox import CandidateFile, EvalOptions, Evaluator
from evaluator.wire.records import Status

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

CPU = FIXTURES / "candidates" / "cpu"
NAMES = ["cpp_correct", "cpp_compile_error", "torch_ops_correct"]


@pytest.fixture
def two_nodes():
    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2})
    cluster.add_node(num_cpus=2)
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.mark.slow
def test_builds_spread_over_the_cluster_and_reach_the_lane_that_judges(tmp_path, two_nodes):
    files = [CandidateFile(name=f"{i}-{n}", path=CPU / f"{n}.py") for i, n in enumerate(NAMES)]
    settings = dict(device="cpu", size="small", run_timeout_s=120, timing_budget_s=0.2, baselines=["eager"],
                    run_rejected=True)
    remote = list(Evaluator(EvalOptions(**settings, executor="ray", lanes=1, log_root=tmp_path / "ray")).evaluate_all(files))
    local = list(Evaluator(EvalOptions(**settings, log_root=tmp_path / "local")).evaluate_all(files))
    expected = [Status(expectation(CPU / f"{n}.py")["status"]) for n in NAMES]
    assert [v.status for v in remote] == [v.status for v in local] == expected, [v.error for v in remote]
    measured = {"timing_mismatch", "shaky_timing"}  # how steady timings were on a loaded machine, not what was found
    assert [sorted(f.name for f in v.flags if f.name not in measured) for v in remote] == \
        [sorted(f.name for f in v.flags if f.name not in measured) for v in local]
    nodes = {node["NodeID"][:16] for node in ray.nodes() if node["Alive"]}
    built = [v.built_on for v in remote]
    assert all(b and "ray node" in b for b in built), built
    assert {b.rsplit(" ", 1)[-1].rstrip(")") for b in built} == nodes, (built, nodes)  # both machines built
    judged = [v.judged_on for v in remote if v.status != Status.compile_error]
    assert len(set(judged)) == 1 and "ray node" in judged[0]  # one lane judged every one that built
    failed = next(v for v in remote if v.status == Status.compile_error)
    assert failed.judged_on == failed.built_on  # a failed build is its own last word, where it was built
    assert all(v.built_on and v.judged_on for v in local)
