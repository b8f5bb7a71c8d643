"""`harness eval`'s verdicts in the store, as each is reached (`EvalRecorder`): one run per kind (`eval`, or
`golden` for files under candidates/golden/), each file a sample named by its path. Used by `harness eval`,
`harness eval --problems` and `harness bench`."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console

from evaluator.wire.identity import gpu_hardware
from evaluator.wire.records import Status, Verdict
from harness.core.config import default_store_path
from harness.core.records import Candidate, ParseResult, Run
from harness.core.store import StoreError, open_store
from harness.generation.parsing import parse_source

EVAL_RUN, GOLDEN_RUN = "eval", "golden"

_err = Console(stderr=True)


def is_golden_path(path: Path) -> bool:
    """True for a file under `candidates/golden/` (the project's, or any such folder)."""
    resolved = path.resolve()
    try:
        from evaluator.wire.assets import asset_dir

        if resolved.is_relative_to((asset_dir("candidates") / "golden").resolve()):
            return True
    except FileNotFoundError:
        pass
    parts = resolved.parts
    return any(parts[i] == "candidates" and parts[i + 1] == "golden" for i in range(len(parts) - 1))


def eval_sample_name(path: Path, golden: bool, cwd: Path | None = None) -> str:
    """How a `harness eval` file is named in its run: a golden file's path under golden/ without
    `.py`; another file's path relative to the working folder (`../runs/x.py` when outside it: never an absolute
    path, which is long to read and names the machine)."""
    resolved = path.resolve()
    if golden:
        parts = resolved.parts
        for i in range(len(parts) - 2, -1, -1):
            if parts[i] == "candidates" and parts[i + 1] == "golden":
                return str(Path(*parts[i + 2:]).with_suffix(""))
        return resolved.stem
    return os.path.relpath(resolved, (cwd or Path.cwd()).resolve())


def _eval_candidate(run_id: str, path: Path, verdict: Verdict, scope: str) -> Candidate:
    """The candidate record of one judged file: its source when the file still holds what was
    judged (kept even when it does not parse, for the report), and how that source parses."""
    sample = eval_sample_name(path, run_id == GOLDEN_RUN)
    source = None
    try:
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() == verdict.source_sha256:
            source = data.decode("utf-8")
    except (OSError, UnicodeDecodeError):
        pass
    if source is not None:
        parse = parse_source(source)
    else:  # unreadable, gone or changed since: the evaluator's words are all there is
        parse = ParseResult(detail=verdict.error if verdict.status == Status.parse_error else None)
    return Candidate(id=f"{run_id}/{sample}@{scope[:8]}", run_id=run_id, sample=sample, problem=verdict.problem,
                     source=source, source_sha256=verdict.source_sha256 or None, parse=parse,
                     path=str(path.resolve()))


class EvalRecorder:
    """Verdicts judged by `evaluator` (an `evaluator.parent.sandbox.Evaluator`) outside a generate run, into
    the store as each is reached (an interrupt loses none): one run per kind (`eval`, or `golden` for
    files under candidates/golden/), model and variant `-`, the candidate source when the file still
    holds it. The store is opened when it is made, before any work: raises StoreError."""

    def __init__(self, store_path: Path | None, evaluator: Any, *, console: Console | None = None):
        from harness.runs.pipeline import versions

        self.path = store_path or default_store_path()
        self.store = open_store(self.path)
        self.evaluator, self.console, self.stored = evaluator, console or _err, 0
        self.options = evaluator.options
        self.hardware = gpu_hardware() if evaluator.device == "cuda" else None
        self.versions = versions()

    def add(self, file: Any, verdict: Verdict) -> None:
        """One verdict; `file` the evaluated `CandidateFile` (or path)."""
        ev, compile_only, run_rejected = self.evaluator, self.options.compile_only, self.options.run_rejected
        file_path = Path(getattr(file, "path", file))
        run_id = GOLDEN_RUN if is_golden_path(file_path) else EVAL_RUN
        # one candidate row per file and setting, so a rerun under new rules replaces the verdict it links
        settings = [verdict.problem, verdict.size, ev.device_name, compile_only] + ([True] if run_rejected else [])
        scope = hashlib.sha256(json.dumps(settings).encode()).hexdigest()
        run = Run(id=run_id, mode="golden" if run_id == GOLDEN_RUN else "eval",
                  config={"problem": ev.problem.name, "size": ev.size, "device": ev.device, "model": "-",
                          "variant": "-", "compile_only": compile_only, "run_rejected": run_rejected,
                          "command": "harness eval"},
                  versions=self.versions, hardware=self.hardware, device_name=ev.device_name)
        item = (_eval_candidate(run_id, file_path, verdict, scope), ev.key(verdict), verdict)
        self.stored += self.store.record_eval(run, [item], device_name=ev.device_name, listed_as=("-", "-"))

    def close(self) -> int:
        self.store.close()
        self.console.print(f"[dim]stored {self.stored} verdict(s) in {self.path}[/]")
        return self.stored


def record_eval_verdicts(store_path: Path | None, evaluator: Any, files: Sequence[Any], verdicts: Sequence[Verdict],
                         *, console: Console | None = None) -> int:
    """EvalRecorder for verdicts already judged. Returns the number stored; a store that cannot be
    opened is reported, not raised."""
    try:
        recorder = EvalRecorder(store_path, evaluator, console=console)
    except StoreError as err:
        (console or _err).print(f"[red]error:[/] verdicts not stored: {err}")
        return 0
    for file, verdict in zip(files, verdicts):
        recorder.add(file, verdict)
    return recorder.close()
