"""`executor="ray"` on a cluster of two machines (ray.cluster_utils.Cluster: two nodes of this one, CPU
only), judging CPU fixtures: builds are Ray tasks spread over both machines, each build's folder reaches
the lane that judges it, a candidate that kills its executor costs only itself, and the verdicts are the
local executor's, each saying where it was built and judged."""

import pytest

from conftest import CPU, GOOD, ROOT, expectation
from evaluator.parent.sandbox import CandidateFile, EvalOptions, Evaluator
from evaluator.wire.records import Status

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

NAMES = ["cpp_correct", "os_exit_in_forward", "cpp_compile_error", "wrong_values", "forward_raises", "nan_output",
         "torch_ops_correct"]


@pytest.fixture(scope="module")
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
def test_the_cluster_builds_on_both_machines_and_its_lanes_give_the_local_verdicts(tmp_path, two_nodes,
                                                                                   bad_input_verdicts):
    files = [CandidateFile(name=f"{i}-{n}", path=CPU / f"{n}.py") for i, n in enumerate(NAMES)]
    settings = dict(device="cpu", size="small", run_timeout_s=120, timing_budget_s=0.2, baselines=["eager"],
                    run_rejected=True)
    evaluator = Evaluator(EvalOptions(**settings, executor="ray", lanes=1, log_root=tmp_path / "ray"))
    remote = list(evaluator.evaluate_all(files))
    # the same files judged by local lanes, once for the session (the good one after each fixture: after the first)
    local = [bad_input_verdicts[n if n != GOOD.stem else f"after-{NAMES[0]}"] for n in NAMES]
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
    # builds on both machines; each verdict says where it was built and judged
    nodes = {node["NodeID"][:16] for node in ray.nodes() if node["Alive"]}
    built = [v.built_on for v in remote]
    assert all(b and "ray node" in b for b in built), built
    assert {b.rsplit(" ", 1)[-1].rstrip(")") for b in built} == nodes, (built, nodes)
    judged = {v.judged_on for v in remote if v.status != Status.compile_error}
    assert len(judged) == 1 and "ray node" in judged.pop()  # one lane judged every one that built
    failed = next(v for v in remote if v.status == Status.compile_error)
    assert failed.judged_on == failed.built_on  # a failed build is its own last word, where it was built
    assert all(v.built_on and v.judged_on for v in local)


@pytest.mark.slow
def test_a_warm_judge_on_the_cluster_judges_on_two_lanes_at_once(two_nodes):
    """`harness serve --executor ray`, `Judge(executor="ray")`: a lane per Ray actor, kept warm between calls;
    `evaluate_many` judges one candidate on each lane at once, and the verdicts are the local ones."""
    from harness import Judge

    sources = [(CPU / f"{n}.py").read_text() for n in ("torch_ops_correct", "wrong_values", "torch_ops_correct")]
    with Judge(problem="gemm_scale_bn", size="small", device="cpu", executor="ray", lanes=2,
               run_timeout_s=120) as judge:
        assert judge.lanes == 2
        verdicts = list(judge.evaluate_many(sources + ["x = 1\n"]))
    assert [v.status for v in verdicts] == [Status.correct, Status.incorrect, Status.correct, Status.parse_error]
    assert all("ray node" in v.judged_on for v in verdicts[:3]), [v.judged_on for v in verdicts]
    assert verdicts[0].runtime_ms > 0 and not verdicts[1].ranked and "ModelNew" in verdicts[3].why


@pytest.mark.slow
def test_a_suites_next_problem_is_built_on_the_cluster_during_this_batch_and_its_own_batch_takes_it(tmp_path, two_nodes):
    """`eval --problems --executor ray`: a batch submits the next problem's builds as Ray tasks once its own are
    (Evaluator.evaluate_all's `prebuild`) and does not wait for them; the next problem's batch takes the task's
    result instead of building again."""
    from evaluator.parent import ray_builds

    settings = dict(device="cpu", compile_only=True, executor="ray", lanes=1, log_root=tmp_path / "ray")
    following = Evaluator(EvalOptions(problem="gemm_scale_bn", size="small", **settings))
    candidate = CandidateFile(name="cpp_correct", path=CPU / "cpp_correct.py")
    _, source, digest, _, _ = following._prepare(candidate, True)
    before = Evaluator(EvalOptions(problem=str(ROOT / "reference/minibench/level1/1_ReLU.py"), **settings))
    assert list(before.evaluate_all([], prebuild=[(candidate.name, source, digest)])) == []  # never judged here
    assert (digest, "cpu", None) in ray_builds._AHEAD  # submitted, not waited for
    [verdict] = following.evaluate_all([candidate])
    assert verdict.status == Status.compiled and "ray node" in verdict.built_on, (verdict.status, verdict.error)
    assert (digest, "cpu", None) not in ray_builds._AHEAD  # taken, not built again
