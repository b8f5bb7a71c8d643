"""The child side of evaluation: runs inside a fresh process, imports ONE candidate.

    python -m evaluator.worker --request FILE --fd N

Reads the request (then deletes it), reports each phase start on the private pipe `N`,
and ends with exactly one verdict there. Everything the candidate prints goes to this
process's stdout/stderr, which the parent captures and caps.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import os
import platform
import random
import shutil
import socket
import subprocess
import sys
import time
import traceback
from pathlib import Path

# Import torch and bind the comparison and timing functions before the candidate exists.
import torch

from evaluator import correctness as cmp
from evaluator.problem import load_problem
from evaluator.records import (
    Correctness, EvalRequest, Environment, Flag, FlagPolicy, Phase, Status, Verdict, WorkerMessage,
)
from evaluator.timing import Timer

ERROR_CHARS = 6000
# Global switches a candidate must not flip: they change what the baselines compute.
GLOBAL_FLAGS = {
    "float32_matmul_precision": torch.get_float32_matmul_precision,
    "cuda.matmul.allow_tf32": lambda: torch.backends.cuda.matmul.allow_tf32,
    "cudnn.allow_tf32": lambda: torch.backends.cudnn.allow_tf32,
    "cuda.matmul.allow_fp16_reduced_precision_reduction":
        lambda: torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction,
    "default_dtype": torch.get_default_dtype,
    "deterministic_algorithms": torch.are_deterministic_algorithms_enabled,
}


class Channel:
    """The private pipe to the parent: one JSON line per message."""

    def __init__(self, fd: int, nonce: str):
        os.set_inheritable(fd, False)  # the candidate's children never see it
        self.stream = os.fdopen(fd, "w", buffering=1)
        self.nonce = nonce

    def phase(self, phase: Phase) -> None:
        self.stream.write(WorkerMessage(kind="phase", phase=phase).model_dump_json() + "\n")
        self.stream.flush()

    def verdict(self, verdict: Verdict) -> None:
        self.stream.write(WorkerMessage(kind="verdict", verdict=verdict, nonce=self.nonce).model_dump_json() + "\n")
        self.stream.flush()


class Judged(Exception):
    """Ends the evaluation early with a status and a reason."""

    def __init__(self, status: Status, phase: Phase, error: str):
        super().__init__(error)
        self.status, self.phase, self.error = status, phase, error


def describe_exception(prefix: str) -> str:
    text = traceback.format_exc()
    return f"{prefix}: {text[-ERROR_CHARS:]}"


def describe_import_failure(err: BaseException) -> str:
    """Compiler errors first (they sit deep inside torch's build exception), then the traceback."""
    text = str(err)
    errors = [line.strip() for line in text.splitlines() if " error" in line or line.startswith("error")]
    if "Error building extension" in text and errors:
        return "build failed: " + "\n".join(errors[:5]) + "\n\n" + describe_exception("traceback")
    return describe_exception("importing the candidate failed")


def read_global_flags() -> dict[str, str]:
    return {name: str(get()) for name, get in GLOBAL_FLAGS.items()}


def restore_global_flags(saved: dict[str, str]) -> None:
    torch.set_float32_matmul_precision(saved["float32_matmul_precision"])
    torch.backends.cuda.matmul.allow_tf32 = saved["cuda.matmul.allow_tf32"] == "True"
    torch.backends.cudnn.allow_tf32 = saved["cudnn.allow_tf32"] == "True"
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = (
        saved["cuda.matmul.allow_fp16_reduced_precision_reduction"] == "True")
    torch.set_default_dtype(getattr(torch, saved["default_dtype"].removeprefix("torch.")))
    torch.use_deterministic_algorithms(saved["deterministic_algorithms"] == "True")


def describe_environment(device: str) -> Environment:
    env = dict(device=device, torch_version=torch.__version__, cuda_version=torch.version.cuda,
               python=platform.python_version(), hostname=socket.gethostname())
    if device == "cuda":
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        env.update(device_name=props.name, capability=f"{props.major}.{props.minor}",
                   sm_count=props.multi_processor_count)
        if shutil.which("nvidia-smi"):
            try:
                out = subprocess.run(
                    ["nvidia-smi", "--query-gpu=driver_version,clocks.sm", "--format=csv,noheader,nounits",
                     f"--id={torch.cuda.current_device()}"], capture_output=True, text=True, timeout=10).stdout
                driver, clock = (part.strip() for part in out.strip().splitlines()[0].split(","))
                env.update(driver=driver, sm_clock_mhz=int(clock) if clock.isdigit() else None)
            except (OSError, ValueError, IndexError, subprocess.SubprocessError):
                pass
    else:
        env.update(device_name=f"CPU {platform.processor() or platform.machine()} x{os.cpu_count()}")
    return Environment(**env)


def import_file(path: Path, module_name: str):
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def uses_cuda_source(path: Path) -> bool:
    text = path.read_text(errors="replace")
    return "cuda_sources" in text or "__global__" in text


class Evaluation:
    """One candidate's evaluation inside the worker."""

    def __init__(self, request: EvalRequest, channel: Channel):
        self.request, self.channel = request, channel
        self.problem = load_problem(request.problem_dir)
        self.device = request.device
        self.tolerances = self.problem.tolerances
        self.rel_floor = min(t.atol for t in self.tolerances.values())
        self.rng = random.Random(request.seed)
        self.flags: list[Flag] = []
        self.phase_seconds: dict[str, float] = {}
        self.environment: Environment | None = None
        self.correctness: Correctness | None = None
        self.timing = None
        self.baselines: dict = {}

    # -- phases ---------------------------------------------------------------------------------

    def run(self) -> Verdict:
        try:
            self.environment = describe_environment(self.device)
            self._enter(Phase.compile)
            candidate_module = self.import_candidate()
            if self.request.compile_only:
                return self.verdict(Status.compiled, None, self.compile_only_note())
            self._enter(Phase.init)
            reference_module, init_inputs = self.import_reference()
            reference, candidate = self.build_models(reference_module, candidate_module, init_inputs)
            self._enter(Phase.check)
            self.check(reference_module, reference, candidate)
            if not self.correctness_passed:
                return self.verdict(Status.incorrect, Phase.check, self.incorrect_reason())
            self._enter(Phase.time)
            self.time_all(reference_module, reference, candidate)
            return self.verdict(Status.correct, None, None)
        except Judged as judged:
            return self.verdict(judged.status, judged.phase, judged.error)
        finally:
            self._leave()

    def _enter(self, phase: Phase) -> None:
        self._leave()
        self._current, self._started = phase, time.monotonic()
        self.channel.phase(phase)

    def _leave(self) -> None:
        if getattr(self, "_current", None) is not None:
            self.phase_seconds[self._current.value] = round(time.monotonic() - self._started, 3)
            self._current = None

    def verdict(self, status: Status, phase: Phase | None, error: str | None) -> Verdict:
        self._leave()
        speedup = {}
        if self.timing is not None:
            speedup = {name: stats.median_ms / self.timing.median_ms for name, stats in self.baselines.items()}
        return Verdict(
            candidate=self.request.candidate_name, source_sha256="", problem=self.problem.name,
            size=self.request.size, device=self.device, status=status, phase=phase, error=error,
            correctness=self.correctness, runtime_ms=self.timing.median_ms if self.timing else None,
            timing=self.timing, baselines=self.baselines, speedup=speedup, flags=self.flags,
            phase_seconds=dict(self.phase_seconds), environment=self.environment,
        )

    def compile_only_note(self) -> str:
        note = "built only (--compile-only): not run, so neither checked nor timed"
        if self.device == "cpu" and uses_cuda_source(Path(self.request.candidate_path)):
            visible = torch.cuda.is_available()
            note += "; this is a CUDA candidate and " + ("it was not run on the GPU" if visible else
                                                         "there is no CUDA GPU on this machine to run it")
        return note

    # -- compile --------------------------------------------------------------------------------

    def import_candidate(self):
        flags_before = read_global_flags()
        try:
            module = import_file(Path(self.request.candidate_path), "kh_candidate")
        except SystemExit as err:
            raise Judged(Status.compile_error, Phase.compile, f"the candidate called exit({err.code}) at import")
        except BaseException as err:
            raise Judged(Status.compile_error, Phase.compile, describe_import_failure(err))
        self.check_global_flags(flags_before, "importing the candidate")
        if not isinstance(getattr(module, "ModelNew", None), type):
            raise Judged(Status.parse_error, Phase.compile, "the module defines no class ModelNew")
        return module

    def check_global_flags(self, before: dict[str, str], when: str) -> None:
        after = read_global_flags()
        changed = [f"{k}: {before[k]} -> {after[k]}" for k in before if before[k] != after[k]]
        if changed:
            self.flags.append(Flag(name="precision_flags", policy=FlagPolicy.reject,
                                   reason=f"{when} changed global torch flags ({'; '.join(changed)}); restored"))
            restore_global_flags(before)

    # -- init -----------------------------------------------------------------------------------

    def import_reference(self):
        module = import_file(self.problem.reference_path, "kh_reference")
        for name, value in self.problem.size_values(self.request.size).items():
            setattr(module, name, value)
        return module, module.get_init_inputs()

    def build_models(self, reference_module, candidate_module, init_inputs):
        torch.manual_seed(self.rng.randrange(2**31))
        reference = reference_module.Model(*init_inputs)
        try:
            candidate = candidate_module.ModelNew(*init_inputs)
        except BaseException:
            raise Judged(Status.runtime_error, Phase.init, describe_exception("ModelNew(*get_init_inputs()) raised"))
        if not isinstance(candidate, torch.nn.Module):
            raise Judged(Status.incorrect, Phase.init, f"ModelNew is a {type(candidate).__name__}, not an nn.Module")
        reference_state = reference.state_dict()
        candidate_state = candidate.state_dict()
        missing = [k for k in reference_state if k not in candidate_state]
        if missing:
            raise Judged(Status.incorrect, Phase.init,
                         "ModelNew lacks the reference's parameters/buffers (same attribute names are required): "
                         + ", ".join(missing))
        mismatched = [f"{k}: {tuple(candidate_state[k].shape)} vs {tuple(v.shape)}"
                      for k, v in reference_state.items() if tuple(candidate_state[k].shape) != tuple(v.shape)]
        if mismatched:
            raise Judged(Status.incorrect, Phase.init, "parameter shapes differ from the reference: " + "; ".join(mismatched))
        try:
            candidate.load_state_dict(reference_state, strict=False)
            candidate.to(self.device)
        except BaseException:
            raise Judged(Status.runtime_error, Phase.init, describe_exception("loading the reference weights into ModelNew failed"))
        return reference.to(self.device), candidate

    # -- check ----------------------------------------------------------------------------------

    def check(self, reference_module, reference, candidate) -> None:
        torch.set_float32_matmul_precision("highest")  # the fp32 reference is real fp32
        reference64 = copy.deepcopy(reference).to(torch.float64)
        train = self.problem.mode == "train"
        for model in (reference, reference64, candidate):
            model.train(train)
        compared = list(reference64.state_dict())
        main = cmp.ModeAccumulator(self.problem.mode, self.tolerances)
        seeds: list[int] = []
        try:
            index = 0
            for distribution in self.problem.distributions:
                for _ in range(self.problem.trials):
                    seed = self.rng.randrange(2**31)
                    seeds.append(seed)
                    self.trial(reference_module, reference, reference64, candidate, distribution, seed,
                               candidate_first=index % 2 == 1, acc=main, compare_state=True)
                    index += 1
            eval_check = None
            if self.problem.check_eval_mode and train:
                eval_check = cmp.ModeAccumulator("eval", self.tolerances)
                for model in (reference, reference64, candidate):
                    model.eval()
                seed = self.rng.randrange(2**31)
                seeds.append(seed)
                try:
                    self.trial(reference_module, reference, reference64, candidate, self.problem.distributions[0],
                               seed, candidate_first=False, acc=eval_check, compare_state=True)
                except Judged as judged:
                    eval_check.fail(judged.error)
                for model in (reference, reference64, candidate):
                    model.train(train)
        except Judged:
            raise
        except BaseException:
            raise Judged(Status.runtime_error, Phase.check, describe_exception("the candidate failed while being checked"))
        main_record = main.record()
        self.correctness = Correctness(
            tiers=main_record.tiers, max_abs_err=main_record.max_abs_err, max_rel_err=main_record.max_rel_err,
            main=main_record, eval_mode=eval_check.record() if eval_check else None,
            distributions=list(self.problem.distributions), seeds=seeds, buffers_checked=compared,
        )
        self.main_accumulator = main

    def trial(self, reference_module, reference, reference64, candidate, distribution: str, seed: int, *,
              candidate_first: bool, acc: cmp.ModeAccumulator, compare_state: bool) -> None:
        generator = torch.Generator().manual_seed(seed)
        inputs = cmp.make_inputs(reference_module.get_inputs(), distribution, generator, self.device)
        pristine = cmp.clone_inputs(inputs)
        candidate_inputs = cmp.clone_inputs(inputs)
        inputs64 = [x.double() if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]

        def run_candidate():
            flags_before = read_global_flags()
            try:
                out = candidate(*candidate_inputs)
            except BaseException:
                raise Judged(Status.runtime_error, Phase.check, describe_exception("ModelNew.forward raised"))
            self.check_global_flags(flags_before, "ModelNew.forward")
            return out

        with torch.no_grad():
            if candidate_first:
                out = run_candidate()
                if self.device == "cuda":
                    torch.cuda.synchronize()
                reference(*inputs)
            else:
                reference(*inputs)  # its freed output is where a buffer-reusing candidate would look
                out = run_candidate()
            if self.device == "cuda":
                torch.cuda.synchronize()
            expected = reference64(*inputs64)
        acc.trials += 1
        changed = cmp.changed_inputs(pristine, candidate_inputs)
        if changed:
            acc.fail(f"the candidate modified its input(s) {changed} in place")
        if isinstance(out, torch.Tensor) and any(
                isinstance(x, torch.Tensor) and out.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
                for x in candidate_inputs):
            acc.fail("the output shares memory with an input")
        acc.add("output", cmp.compare_tensor("output", out, expected, self.tolerances, self.rel_floor))
        if compare_state:
            candidate_state = candidate.state_dict()
            for name, value in reference64.state_dict().items():
                acc.add(name, cmp.compare_tensor(name, candidate_state[name], value, self.tolerances, self.rel_floor))

    @property
    def correctness_passed(self) -> bool:
        return self.main_accumulator.passed

    def incorrect_reason(self) -> str:
        main = self.correctness.main
        if main.failure:
            return main.failure
        loosest = max(self.tolerances.items(), key=lambda kv: (kv[1].atol, kv[1].rtol))
        worst = max(main.tensors, key=lambda t: t.max_abs_err if t.max_abs_err is not None else float("inf"))
        return (f"outside every tolerance tier (loosest `{loosest[0]}`: atol={loosest[1].atol:g}, "
                f"rtol={loosest[1].rtol:g}); worst tensor `{worst.name}` max abs err {worst.max_abs_err:.3g}")

    # -- time -----------------------------------------------------------------------------------

    def time_all(self, reference_module, reference, candidate) -> None:
        timer = Timer(self.device, self.request.timing_budget_s, self.request.min_reps, self.request.max_reps)
        generator = torch.Generator().manual_seed(self.rng.randrange(2**31))
        inputs = cmp.make_inputs(reference_module.get_inputs(), self.problem.distributions[0], generator, self.device)
        torch.set_float32_matmul_precision("highest")
        try:
            with torch.no_grad():
                events, walls = timer.time(lambda: candidate(*inputs))
        except BaseException:
            raise Judged(Status.runtime_error, Phase.time, describe_exception("ModelNew.forward raised while timed"))
        self.timing = events
        # Work the events do not see (a side stream, a thread) shows up on the host clock.
        if walls.median_ms > 1.5 * events.median_ms + 0.1:
            self.flags.append(Flag(name="untimed_work", reason=(
                f"host clock {walls.median_ms:.3f} ms vs device events {events.median_ms:.3f} ms per call: work "
                "outside the timed stream; the host-clock time is used")))
            self.timing = walls
        self.recheck_after_timing(reference_module, reference, candidate)
        for name in self.request.baselines:
            try:
                self.baselines[name] = self.time_baseline(name, reference, inputs, timer)
            except Exception as err:  # a baseline failing is not the candidate's fault
                self.flags.append(Flag(name="baseline_failed", reason=f"baseline `{name}` failed: {err}"[:500]))
            finally:
                torch.set_float32_matmul_precision("highest")

    def recheck_after_timing(self, reference_module, reference, candidate) -> None:
        """A candidate that degrades after many calls (or caches) is caught here."""
        reference64 = copy.deepcopy(reference).to(torch.float64)
        acc = cmp.ModeAccumulator(self.problem.mode, self.tolerances)
        try:
            self.trial(reference_module, reference, reference64, candidate, self.problem.distributions[-1],
                       self.rng.randrange(2**31), candidate_first=True, acc=acc, compare_state=False)
        except Judged as judged:
            raise Judged(Status.runtime_error, Phase.time, judged.error)
        if not acc.passed or not all(acc.tiers[t] or not self.correctness.tiers[t] for t in acc.tiers):
            self.timing = None
            failure = acc.failure or "errors grew beyond the tiers it passed before"
            raise Judged(Status.incorrect, Phase.time, f"wrong on fresh inputs after the timing loop: {failure}")

    def time_baseline(self, name: str, reference, inputs, timer: Timer):
        model = copy.deepcopy(reference)
        tf32 = name.endswith("_tf32")
        torch.set_float32_matmul_precision("high" if tf32 else "highest")
        if name.startswith("compile"):
            torch._dynamo.reset()
            model = torch.compile(model)
        elif name.startswith("part:"):
            # One sub-module alone (e.g. `part:gemm_tf32`: cuBLAS's GEMM with nothing fused): a ceiling.
            part = name.removeprefix("part:").removesuffix("_tf32")
            model = getattr(model, part)
        elif not name.startswith("eager"):
            raise ValueError(f"unknown baseline {name!r}")
        with torch.no_grad():
            return timer.time(lambda: model(*inputs))[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--request", required=True)
    parser.add_argument("--fd", type=int, required=True)
    args = parser.parse_args(argv)
    request_path = Path(args.request)
    request = EvalRequest.model_validate_json(request_path.read_text())
    request_path.unlink()
    channel = Channel(args.fd, request.nonce)
    try:
        verdict = Evaluation(request, channel).run()
    except BaseException:
        verdict = Verdict(candidate=request.candidate_name, source_sha256="", problem=Path(request.problem_dir).name,
                          size=request.size, device=request.device, status=Status.runtime_error,
                          error=describe_exception("the evaluator failed"))
    channel.verdict(verdict)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # skip interpreter teardown: a candidate's atexit hooks or destructors cannot change the verdict


if __name__ == "__main__":
    sys.exit(main())
