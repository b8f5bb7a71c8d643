"""What a judgement holds on the GPU (evaluator.referee.memory) and the stage's layout at KernelBench's sizes."""

from evaluator.referee.memory import plan
from evaluator.wire.stage import PLACE_SLACK, Layout

GIB = 1 << 30
H100 = 79.6 * GIB   # what torch.cuda.mem_get_info reports of an H100 80GB HBM3
H200 = 139.8 * GIB


def layout_of(shape: list[int], out_shape: list[int], buffers: list[int] = ()) -> Layout:
    n = 4
    for d in out_shape:
        n *= d
    return Layout.plan([(0, shape, "float32")], n, list(buffers), budget=3 * GIB, most=256)


def sizes(layout: Layout, out_shape: list[int], state: int = 0) -> dict:
    n = 4
    for d in out_shape:
        n *= d
    return dict(stage_bytes=layout.size, input_bytes=layout.inputs[0].nbytes, output_bytes=n, state_bytes=state)


def test_a_6_4_gb_elementwise_problem_is_judged_in_host_memory_on_an_h100_and_on_the_device_on_an_h200():
    relu = [4096, 393216]  # KernelBench's 19_ReLU
    layout = layout_of(relu, relu)
    on_h100 = plan("cuda", int(H100), ahead=4, **sizes(layout, relu))
    assert on_h100.judge_device == "cpu" and on_h100.ahead == 0
    assert on_h100.need_bytes < 0.9 * H100
    said = on_h100.said()
    assert said and "host memory" in said and "no executor was started ahead" in said
    on_h200 = plan("cuda", int(H200), ahead=4, **sizes(layout, relu))
    assert on_h200.judge_device == "cuda" and on_h200.said() is None


def test_the_repo_problem_at_kernelbench_stays_on_the_device_with_executors_ahead():
    x, out = [16384, 4096], [16384, 4096]  # gemm_scale_bn at kernelbench: weights 64 MiB, two running stats
    layout = layout_of(x, out, [4096 * 4, 4096 * 4])
    judged = plan("cuda", int(H100), ahead=4, **sizes(layout, out, state=4096 * 4096 * 4 + 4 * 4096 * 4))
    assert judged.judge_device == "cuda" and judged.ahead == 4 and judged.said() is None


def test_the_twins_stage_comes_out_of_the_executors_started_ahead_where_memory_binds():
    """Eager's twin (evaluator.referee.twin) is started ahead with each round, a stage more: where memory is what
    limits the executors ahead, one fewer candidate's; where it is not, none."""
    x, out = [16384, 4096], [16384, 4096]
    layout = layout_of(x, out, [4096 * 4, 4096 * 4])
    state = 4096 * 4096 * 4 + 4 * 4096 * 4
    roomy = plan("cuda", int(H100), ahead=4, beside=1, **sizes(layout, out, state=state))
    assert roomy.ahead == 4
    fits = plan("cuda", int(H100), ahead=64, **sizes(layout, out, state=state)).ahead  # memory binds
    assert 0 < fits < 64 and plan("cuda", int(H100), ahead=64, beside=1, **sizes(layout, out, state=state)).ahead == fits - 1


def test_off_a_gpu_nothing_moves():
    layout = layout_of([64, 32], [64, 16])
    assert plan("cpu", 0, ahead=2, **sizes(layout, [64, 16])).judge_device == "cpu"
    assert plan("cpu", 0, ahead=2, **sizes(layout, [64, 16])).ahead == 2


def test_a_large_outputs_place_moves_within_the_slack_and_a_small_ones_within_a_call():
    relu = [4096, 393216]
    large = layout_of(relu, relu)
    assert large.sets == 1 and large.slack == PLACE_SLACK
    assert large.size == large.region + large.span + PLACE_SLACK  # not a second 6.4 GB span
    assert large.place(0.0) == large.region
    assert large.place(0.999999) + large.span <= large.size
    assert large.place(0.999999) - large.region > PLACE_SLACK - 1024
    small = layout_of([64, 32], [64, 16])
    assert small.slack == small.span and small.size == small.region + (small.sets + 1) * small.span
    assert len({small.place(k / 1000) for k in range(1000)}) > 1
