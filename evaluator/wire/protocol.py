"""What the referee and an executor say to each other, and what the parent says to the referee.

Three processes judge a candidate (see evaluator.referee):

* the parent (evaluator.parent.sandbox, inside the harness) sends the referee one `JudgeRequest` per
  candidate on a pipe and reads back one `JudgeReply`;
* the referee (evaluator.referee) owns the reference, its float64 twin, the seeds, the inputs,
  the baselines, the tolerances and every comparison; it never imports candidate code;
* the executor (evaluator.executor), contained (evaluator.executor.lockdown), imports ONE candidate
  and does what the referee's `Command`s ask: build ModelNew, load the weights it is given, run
  forwards on the inputs it is given, the clocked ones (`Go`, `Put`) through the stage
  (evaluator.wire.stage), the others through the exchange (evaluator.wire.exchange). It answers each command
  with one `Reply`: commands and replies carry only `TensorSlot`s, never tensor bytes.

Everything an executor sends is the candidate's to forge: the referee validates every field
and judges only what it compared itself or measured with its own clock. Commands come from the
referee, so they may carry pickled values (`init_inputs`); replies never do.
"""

from __future__ import annotations

import base64
import pickle
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from evaluator.wire.records import SHAKY_DRIFT, SHAKY_SPREAD, Containment, Flag, Phase, TimingStats, Verdict


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")


# ------------------------------------------------------------------------------------------ tensors

class TensorSlot(Message):
    """One tensor in the exchange or the stage: where its bytes are and how to read them back."""

    name: str = Field(description="What it is: `input.0`, `output`, `state.bn.running_mean`, ...")
    dtype: str = Field(description="A name of evaluator.wire.exchange.DTYPES (`float32`, `int64`, ...).")
    shape: list[int] = Field(description="Its shape; the bytes are contiguous, row-major.")
    offset: int = Field(description="First byte in the exchange (or the stage).")
    nbytes: int = Field(description="Length in bytes: the shape's element count times the dtype's size.")
    in_stage: bool = Field(False, description="In the executor's stage (evaluator.wire.stage), not the exchange.")


class ValueInfo(Message):
    """What a value returned by the candidate is, whether or not its bytes could be shipped."""

    kind: str = Field(description="The Python type's name (`Tensor` for a plain tensor).")
    plain: bool = Field(description="A plain torch.Tensor (or nn.Parameter): no subclass that can run code.")
    dtype: str | None = Field(None, description="The tensor's dtype name, when it is one.")
    shape: list[int] | None = Field(None, description="The tensor's shape, when it is one.")
    device: str | None = Field(None, description="The tensor's device type (`cuda`, `cpu`), when it is one.")
    shipped: bool = Field(False, description="Its bytes are in the exchange (the reply's slot of its name).")


class InputSpec(Message):
    """One positional input of the reference's `get_inputs()`: drawn afresh (floating tensors) or
    passed as it is (other tensors ship once with `construct`, other values are pickled there)."""

    kind: Literal["random", "tensor", "value"] = Field(description="Drawn from a distribution, a fixed tensor, or a value.")
    shape: list[int] = Field(default_factory=list, description="Shape of a drawn tensor.")
    dtype: str = Field("float32", description="dtype of a drawn tensor.")


# ------------------------------------------------------------------------------------------ commands

class ExecutorRequest(Message):
    """What an executor is started for (a file in its folder, deleted once read)."""

    candidate_path: str = Field(description="The candidate file (copied into the executor's folder).")
    device: Literal["cuda", "cpu"] = Field(description="Where to run.")
    compile_only: bool = Field(False, description="Import (build) only, then exit.")
    watch: list[str] = Field(default_factory=list, description="The problem's `[rules] watch`: classes its guard watches.")
    ahead: bool = Field(False, description=(
        "Started ahead of its turn (evaluator.referee.ahead): it also starts cuBLAS (evaluator.executor.first_use)."))


class Construct(Message):
    """Build ModelNew(*init_inputs) (torch seeded with `seed` first) and say which parameters and
    buffers it has, with their shapes."""

    kind: Literal["construct"] = "construct"
    id: int
    init_inputs: str = Field(description="pickle of get_init_inputs(), base64 (the referee's, trusted).")
    seed: int = Field(description="torch.manual_seed before ModelNew is built.")
    dtype: str = Field("float32", description=(
        "The problem's precision (evaluator.wire.exchange.DTYPES): ModelNew is cast to it once built, as the "
        "reference is (KernelBench's `model.to(dtype)`)."))
    inputs: list[InputSpec] = Field(description="The forward's positional inputs, in order.")
    fixed: list[TensorSlot] = Field(default_factory=list, description="Tensors of `tensor` inputs (`input.N`).")
    values: str = Field("", description="pickle of {position: value} for `value` inputs, base64.")
    stream_delay_ms: float = Field(0.0, description=(
        "CUDA: how long the current stream is kept busy before the inputs of a checked call are written "
        "(work that ignores stream order reads NaN)."))
    staged: list[TensorSlot] = Field(default_factory=list, description=(
        "Where the tensor inputs of clocked calls lie in the stage (`input.N`): the forward of `go` reads them "
        "there (its first call; call k reads the set `set_stride` * k bytes further)."))
    sets: int = Field(1, ge=1, description="Input sets in the stage: the most calls one `go` may make.")
    set_stride: int = Field(0, ge=0, description="Bytes from one input set to the next.")
    staged_state: list[str] = Field(default_factory=list, description=(
        "The buffers `put` stages after the output, by state-dict name (the reference's buffers)."))
    state_names: list[str] = Field(default_factory=list, description=(
        "The reference's parameters and buffers, by state-dict name: the only state shipped back (none named: all). "
        "A candidate's own tensors beyond them (a workspace, a cached transpose) are never compared, and shipped "
        "they could outgrow the exchange."))


class LoadState(Message):
    """Load these tensors (the reference's parameters and buffers, copies) into ModelNew, by name."""

    kind: Literal["load_state"] = "load_state"
    id: int
    tensors: list[TensorSlot]


class Call(Message):
    """One checked forward on fresh copies of the stage's first input set, which the referee has just written: the
    output staged at `place`, the inputs as the call left them back into their slots of that set, and (with
    `send_state`) every parameter and buffer through the exchange. Device memory both sides map, so a checked call of
    gigabytes is copied on the device, not through host memory."""

    kind: Literal["call"] = "call"
    id: int
    place: int = Field(ge=0, description="Where in the stage the output goes (the start of its region).")
    train: bool = Field(True, description="Module mode of this call.")
    fill_uninitialized: bool = Field(False, description=(
        "Run it with uninitialised memory filled with NaN (deterministic algorithms, warn only, "
        "fill_uninitialized_memory)."))
    send_state: bool = Field(True, description="Ship the parameters and buffers after the call.")


class Go(Message):
    """`calls` forwards back to back, call k on input set k, which the referee has just written into the stage
    (the executor has no other way to know them): run them, wait for the device after each, say what each
    returned, and keep each output and the buffers after each for `Put`. The referee's clock runs from
    before it wrote the inputs to after it copied out what `Put` staged."""

    kind: Literal["go"] = "go"
    id: int
    train: bool = True
    calls: int = Field(1, ge=1, description="Forwards back to back (a window of that many calls).")
    pace_ms: float = Field(0.0, ge=0.0, le=10_000.0, description=(
        "For the referee's calibrator alone: the device time each of its calls is to take (the candidate's "
        "per call, as the referee's clock measured it), so that its host steps overlap device work as the "
        "candidate's do. Every executor makes it `evaluator.executor.serve.PACE_MS` during the window."))


class Put(Message):
    """Copy the outputs of the last `Go`, each followed by the buffers named at `construct` as that call left
    them (`output.K`, `state.K.NAME`), into the stage one after another from `offset` (chosen by the
    referee once the calls have returned), and wait for the device."""

    kind: Literal["put"] = "put"
    id: int
    offset: int = Field(ge=0)


class Handoff(Message):
    """`calls` forwards handed off one by one through the exchange (evaluator.wire.handoff): write `token` into READY,
    then for each call k wait until GO holds k, read its inputs from `inputs`, run forward, write its output and the
    buffers as it left them into `outputs`, wait for the device and write k into COMMIT. The referee's clock runs from
    the first GO to the last COMMIT; it writes call k+1's inputs only once it has copied call k's outputs."""

    kind: Literal["handoff"] = "handoff"
    id: int
    train: bool = True
    calls: int = Field(ge=1)
    token: int = Field(ge=1, description="The window's number, written into READY once the executor waits.")
    inputs: list[TensorSlot] = Field(description="Where each call's tensor inputs lie in the exchange (`input.N`).")
    outputs: list[TensorSlot] = Field(description="Where each call's `output` and `state.NAME` go in the exchange.")
    pace_ms: float = Field(0.0, ge=0.0, le=10_000.0, description="As `Go.pace_ms` (the referee's calibrator alone).")
    wait_s: float = Field(60.0, gt=0, description="How long the executor waits for the window's GOs before it gives up.")
    on_device: bool = Field(False, description=(
        "`inputs` and `outputs` lie in the stage (a GPU's: calls too large to copy through host memory), not the "
        "exchange: the referee's own stream writes each call's inputs there, GO, waits for COMMIT and copies the output "
        "region out, on the device; the words stay in the exchange."))


class SendState(Message):
    """Ship every parameter and buffer as they are now."""

    kind: Literal["send_state"] = "send_state"
    id: int


class Profile(Message):
    """One more forward on the inputs the referee has written into the stage, observed: the GPU kernels
    it launched (CUDA) or its calls into the candidate's own extension modules (CPU). Stages its output at
    `place`."""

    kind: Literal["profile"] = "profile"
    id: int
    train: bool = True
    place: int = Field(ge=0, description="Where in the stage the output goes (the start of its region).")


class Finish(Message):
    """Say what changed since the import, then exit."""

    kind: Literal["finish"] = "finish"
    id: int


Command = Annotated[Union[Construct, LoadState, Call, Go, Put, Handoff, SendState, Profile, Finish],
                    Field(discriminator="kind")]
COMMAND = TypeAdapter(Command)


# ------------------------------------------------------------------------------------------ replies

class Reply(Message):
    """The executor's answer to one command (id 0: the import). Untrusted: validated by the referee."""

    id: int = Field(description="The command answered.")
    error: str | None = Field(None, description=(
        "Why the command could not be done: the candidate raised (traceback), ModelNew is missing, ... "
        "The referee decides what status that is."))
    error_kind: Literal["build", "import", "no_model_new", "raised", "not_module", "internal", "staging_memory", "room"] | None = Field(
        None, description=(
            "`build`: building its extensions failed; `import`: importing the candidate failed otherwise (or it called "
            "exit); `no_model_new`: it defines no class ModelNew; `raised`: the candidate's code raised; `not_module`: "
            "ModelNew is no nn.Module; `internal`: the executor itself failed; `room`: a window on the device cannot "
            "be had here (said before any call; the referee falls back to windows of one call); `staging_memory`: the "
            "device ran out of memory as the executor staged a call's inputs, before the candidate was called."))
    flags: list[Flag] = Field(default_factory=list, description="What the executor's own guard saw during it.")
    problems: list[str] = Field(default_factory=list, description=(
        "Integrity problems seen in the executor (output aliasing an input, output changed after forward "
        "returned, ...): each fails the call it belongs to."))
    tensors: list[TensorSlot] = Field(default_factory=list, description="Tensors shipped in the exchange.")
    output: ValueInfo | None = Field(None, description="What forward returned (call, go's first call, profile).")
    outputs: list[ValueInfo] = Field(default_factory=list, description="What each of a `go`'s calls returned.")
    state: dict[str, list[int]] | None = Field(None, description="construct: ModelNew's state-dict names and shapes.")
    fill: list[bool] | None = Field(None, description=(
        "call with fill_uninitialized: (deterministic, warn only, fill) as forward left them."))
    events_ms: list[float] = Field(default_factory=list, description=(
        "go, CUDA: the forward's time by device events (the executor's testimony: checked, never ranked)."))
    host_ms: list[float] = Field(default_factory=list, description=(
        "go: the forward's time by the executor's host clock, to the device's synchronize (testimony too)."))
    handled_ms: float | None = Field(None, description=(
        "The executor's host ms from reading the command to writing this reply (a diagnostic for tuning, logged by a "
        "profiling referee and never judged): the rest of the referee's turn is the pipe's."))
    queued: bool = Field(False, description=(
        "handoff: the calls were queued ahead on the device (GO waited for and COMMIT written by the device), not "
        "made one by one from the host. The calibrator's is trusted; a candidate's is testimony, never used."))
    steps_ms: list[float] = Field(default_factory=list, description=(
        "handoff: the median ms a call spent waiting for its GO, reading its inputs onto the device, in forward, writing "
        "what it left into the exchange, and waiting for the device; a checked call: the ms its inputs took to be "
        "queued behind the hold, forward to return (the guard's look included), the device to finish (the hold and "
        "the call), its checks, and the staging of what it shipped (a diagnostic for tuning, like `handled_ms`)."))
    kernels: list[str] = Field(default_factory=list, description="profile: what the forward launched, in order.")
    kernel_times_us: list[float] = Field(default_factory=list, description=(
        "profile, CUDA: each of `kernels`' device time (µs, the profiler's), in the same order; empty on the CPU."))
    libraries: list[str] = Field(default_factory=list, description="profile: shared libraries the candidate built.")
    kernel_count: int | None = Field(None, description="profile: launches in all (`kernels` holds at most 256).")
    jit_events: int | None = Field(None, description=(
        "Triton compiles and autotune benchmarks in this executor since it started (evaluator.executor.triton_watch); "
        "None where Triton is not watched."))
    autotuned: list[str] = Field(default_factory=list, description=(
        "profile: each `@triton.autotune` kernel's chosen configuration, `kernel: BLOCK_M: 128, ..., num_warps: 4`."))
    startup: dict[str, float] = Field(default_factory=dict, description=(
        "import: Unix times at the executor's start-up steps (a diagnostic for tuning, logged by a profiling "
        "referee and never judged)."))


class ExecutorMessage(Message):
    """One line on the executor's channel: the launcher's and the executor's containment reports
    first, then phase starts and replies."""

    kind: Literal["containment", "phase", "reply"]
    containment: Containment | None = None
    phase: Phase | None = None
    reply: Reply | None = None


# ------------------------------------------------------------------------------------------ parent <-> referee

class JudgeRequest(Message):
    """Judge one candidate (its source copied to `path`); `close`: the batch is over; `gated`: the parent's gate is
    over (RefereeConfig.gate_pending); `ready`: answered (an empty reply) once what came before it is over, the
    referee's start and its round at start (evaluator.parent.lanes.LaneWorker._ask_ready)."""

    kind: Literal["judge", "close", "gated", "ready"] = "judge"
    name: str = ""
    path: str = ""
    digest: str = ""
    compile_only: bool = False


class BaselineRound(Message):
    """One timing of every baseline by the referee, with no candidate process alive."""

    index: int = Field(description="0 before the first candidate, then one more each time they are timed again.")
    batch: str = Field(description="The referee's batch id.")
    measured_at: float = Field(description="Unix time at its end.")
    after_candidates: int = Field(description="Candidates judged before it in this batch.")
    baselines: dict[str, Any] = Field(default_factory=dict, description="name -> TimingStats (as a dict).")
    failed: dict[str, str] = Field(default_factory=dict, description="name -> why it could not be timed.")
    window_cost_ms: float | None = Field(None, description=(
        "What a clocked window costs beyond its call, by the calibrator (evaluator.referee.clock); None when it failed."))
    calibration_error: str | None = Field(None, description="Why the calibrator failed, when it did.")
    device_busy: str | None = Field(None, description=(
        "Why the round was timed on a device that was not idle (another process's work on it, for seconds): "
        "the verdicts that divide by it are `shaky_timing`."))
    cached: str | None = Field(None, description=(
        "What the verdicts dividing by it say of stored figures (BaselineSource.cached): read from them, one "
        "baseline re-timed as a spot check; or why they were dropped. None: none were given."))
    stored: bool = Field(False, description=(
        "Its figures are the stored ones (not timed in it: the harness never stores them again)."))
    in_referee: dict[str, Any] = Field(default_factory=dict, description=(
        "Figures the referee timed in its own process that a baseline of the round replaced (name -> TimingStats as a "
        "dict): its own eager's, where eager is the reference judged as a candidate (evaluator.referee.twin). Their "
        "ratio is the bias of the baselines still timed in the referee's process."))


class JudgeReply(Message):
    """The referee's answer: one verdict (its tails are the whole capped streams), or the batch's
    baseline rounds when closing."""

    verdict: Verdict | None = None
    stdout: str = Field("", description="The candidate's capped stdout, base64.")
    stderr: str = Field("", description="The candidate's capped stderr, base64.")
    rounds: list[BaselineRound] = Field(default_factory=list)
    error: str | None = Field(None, description="The referee's own failure.")


def pack(value: Any) -> str:
    """A value for a command (referee to executor only)."""
    return base64.b64encode(pickle.dumps(value)).decode()


def unpack(text: str) -> Any:
    """Executor side: a value the referee packed (never called on anything an executor sent)."""
    return pickle.loads(base64.b64decode(text)) if text else None


# How much of each stream a verdict itself carries; the logs keep more.
VERDICT_TAIL_CHARS = 4000


class RefereeConfig(BaseModel):
    """How the referee judges a batch (written by the parent, from its EvalOptions)."""

    model_config = ConfigDict(extra="forbid")
    problem: str = Field(description="The problem's folder or bare .py file.")
    size: str
    device: str
    baselines: list[str] = Field(description="Baselines timed in every round.")
    precision: str = Field("fp32", description="fp32, fp16 or bf16: what inputs, weights and buffers are cast to.")
    backend: str = Field("cuda", description="cuda, triton or cpp: what the candidates are written in.")
    cached_baselines: dict[str, TimingStats] | None = Field(None, description=(
        "Figures of every baseline stored from an earlier batch on this device model, judge and torch (written by "
        "the parent from its result store, which no executor can reach): a round then times one baseline as a "
        "spot check and divides by these, unless the spot check is beyond the drift bound, when every baseline is "
        "timed again in that round, whose figures then stand in for these (evaluator.referee.stored.adopt_round). "
        "None: every round times every baseline."))
    cached_note: str = Field("", description="Where the stored figures come from, for the verdicts (BaselineSource.cached).")
    seed: int | None = Field(None, description=(
        "The user's pinned seed: every candidate's reference starts from the weights it gives (None: fresh "
        "weights for each). It never seeds an input: those derive from a secret the referee draws for the "
        "batch (evaluator.referee.keys)."))
    timing_budget_s: float = 2.0
    shaky_spread: float = Field(SHAKY_SPREAD, gt=0, description="A series' IQR over its median past which it is shaky.")
    shaky_drift: float = Field(SHAKY_DRIFT, gt=0, description="A baseline's move between rounds past which it is shaky.")
    min_reps: int = 10
    max_reps: int = 200
    warmup: int = 3
    baseline_every: int = Field(8, ge=1, description="Candidates timed between two baseline rounds.")
    eager_as_candidate: bool = Field(True, description=(
        "Eager's figure is the reference judged as a candidate in every round, timed the way candidates are "
        "(evaluator.referee.twin); False: the referee's own loop, in its process (biased where calls are bound by "
        "their launches: docs/timing.md)."))
    compile_timeout_s: float
    run_timeout_s: float
    run_timeout_scaled: bool = Field(False, description=(
        "run_timeout_s is a cap, not the limit: each candidate's limit is scaled to the reference's own time "
        "(evaluator.referee.session.scaled_run_limit). False: a limit the user or the problem set."))
    output_cap_bytes: int
    compile_memory_limit_gb: float | None
    cache_dir: str
    protect: list[str] = Field(default_factory=list, description="Paths no executor may read.")
    builds: str | None = Field(None, description=(
        "How the parent keeps builds away from this referee's clock (recorded with each verdict): cores apart, "
        "or frozen while it times (`builds_group`), or neither."))
    builds_group: str | None = Field(None, description=(
        "The cgroup this referee freezes while it times anything (a baseline round, a candidate's calls), which "
        "holds every build of the batch; None when builds run on cores apart, or no cgroup can be made."))
    cores: list[int] | None = Field(None, description="The CPUs this referee and its executors run on (None: any).")
    device_lanes: int = Field(1, ge=1, description=(
        "Lanes whose referees take turns on this referee's GPU (evaluator.referee.device_share), each planning on "
        "that share of its memory; 1: the GPU is this lane's alone."))
    round_at_start: bool = Field(False, description=(
        "Time the first baseline round as soon as the referee is up, before any request (a lane starts its "
        "referee while the first builds run)."))
    gate_pending: bool = Field(False, description=(
        "Started while the parent still gates the batch's candidates (its static checks, whose work a source can make "
        "last): nothing is timed until a `gated` request comes (or the parent is gone), so no baseline's figure is "
        "taken beside that work."))
    ahead: int = Field(0, ge=0, description=(
        "Executors started before their turn, from the requests already queued: each imports its candidate "
        "(its extension loaded) while another is judged, and is stopped (SIGSTOP) while any candidate is timed "
        "or profiled and while baselines are timed."))
