"""A suite: many problems judged and ranked as one job (`harness run --problems PATH`, `harness eval --problems
PATH`, `harness leaderboard --problems PATH`), and the registry of problems a service names them from.

PATH is one of:
- a folder, KernelBench's own layout: its problem folders (`*/problem.toml`) and bare KernelBench-format files
  (`*.py` defining `Model`, `get_inputs`, `get_init_inputs`), and one level down the same in each subfolder
  (`level1/`, `level2/`: the subfolder's name is the problems' level);
- a suite file (TOML) naming problems, their sizes and levels, and the tier a suite's correct means:

      name = "quick"                 # default: the file's stem
      tier = "loose"                 # the tolerance tier fast_p counts as correct (default loose)
      [[problems]]
      path = "level1/1_ReLU.py"      # relative to the file; a folder, a bare .py, or a name under reference/
      size = "default"               # default: the problem's own, by device
      level = "1"                    # default: the folder it sits in, when that is named level*

Each problem is named once: two problems of one name in a suite are an error, never one silently judged
for the other. Nothing here imports torch or a reference (evaluator.wire.problem reads them with `ast`).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from evaluator.wire.problem import ProblemSpec, load_problem
from evaluator.wire.tiers import Backend, Precision

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


class SuiteError(ValueError):
    """A suite that cannot be read: one line for people."""


class SuiteProblem(BaseModel):
    """One problem of a suite."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(description="The problem's name (its folder's, or the bare file's stem).")
    location: str = Field(description="What `load_problem` reads it from: a folder or a bare .py file.")
    size: str | None = Field(None, description="Its size preset (None: the problem's own, by device).")
    level: str | None = Field(None, description="Its level (KernelBench's `level1` gives `1`), where it has one.")
    backend: Backend | None = Field(None, description="What its candidates are written in (None: the run's, else the problem's).")
    precision: Precision | None = Field(None, description="Its precision (None: the run's, else the problem's).")


class Suite(BaseModel):
    """Problems judged and ranked together."""

    model_config = ConfigDict(extra="forbid")
    name: str
    source: str = Field(description="The folder or suite file it was read from.")
    tier: str = Field("loose", description="The tolerance tier its fast_p counts as correct.")
    problems: list[SuiteProblem]

    def names(self) -> list[str]:
        return [p.name for p in self.problems]

    def levels(self) -> dict[str, str | None]:
        return {p.name: p.level for p in self.problems}


class _FileEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str
    size: str | None = None
    level: str | int | None = None
    backend: Backend | None = None
    precision: Precision | None = None


class _SuiteFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str | None = None
    tier: str = "loose"
    size: str | None = None
    problems: list[_FileEntry | str] = Field(min_length=1)


def level_of(folder: Path) -> str | None:
    """`level1` -> `1`, `level_2` -> `2`; another folder name gives no level."""
    match = re.fullmatch(r"level[_-]?(\w+)", folder.name, flags=re.IGNORECASE)
    return match.group(1) if match else None


def _is_bare_problem(path: Path) -> bool:
    """A `.py` file that defines a top-level Model, get_inputs and get_init_inputs (read as text: a helper
    module or a candidate beside the problems is not one)."""
    if path.name.startswith("_") or path.suffix != ".py":
        return False
    text = path.read_text(errors="replace")
    return all(re.search(rf"^(class|def) {name}\b", text, flags=re.MULTILINE)
               for name in ("Model", "get_inputs", "get_init_inputs"))


def _folder_entries(folder: Path, level: str | None) -> list[tuple[Path, str | None]]:
    found = []
    for path in sorted(folder.iterdir(), key=_natural):
        if path.is_dir() and (path / "problem.toml").is_file():
            found.append((path, level))
        elif path.is_file() and _is_bare_problem(path):
            found.append((path, level))
    return found


def natural_name(name: str) -> tuple:
    """`2_X` before `10_Y`, as KernelBench numbers its problems."""
    return tuple(int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", name))


def _natural(path: Path) -> tuple:
    return natural_name(path.name)


def _spec(location: Path | str) -> ProblemSpec:
    try:
        return load_problem(location)
    except (FileNotFoundError, ValueError) as err:
        raise SuiteError(str(err).strip("'\"")) from err


def load_suite(path: Path | str) -> Suite:
    """The suite at `path` (a folder or a suite TOML file). Raises SuiteError, naming what is wrong."""
    path = Path(path)
    if path.is_file() and path.suffix == ".toml":
        return _suite_file(path)
    if not path.is_dir():
        raise SuiteError(f"no suite at {path}: expected a folder of problems or a suite file (.toml)")
    entries = _folder_entries(path, level_of(path))
    for sub in sorted((p for p in path.iterdir() if p.is_dir() and not (p / "problem.toml").is_file()), key=_natural):
        entries += _folder_entries(sub, level_of(sub))
    if not entries:
        raise SuiteError(f"no problem in {path}: a suite folder holds problem folders (with problem.toml) or "
                         "KernelBench-format .py files (Model, get_inputs, get_init_inputs), or folders of them")
    problems = [SuiteProblem(name=_spec(p).name, location=str(p.resolve()), level=level) for p, level in entries]
    return _checked(Suite(name=path.resolve().name, source=str(path), problems=problems))


def _suite_file(path: Path) -> Suite:
    try:
        data = _SuiteFile(**tomllib.loads(path.read_text()))
    except tomllib.TOMLDecodeError as err:
        raise SuiteError(f"suite file {path} is not TOML: {err}") from err
    except ValidationError as err:
        wrong = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'file'}: {e['msg']}" for e in err.errors())
        raise SuiteError(f"suite file {path}: {wrong}") from err
    problems = []
    for entry in data.problems:
        entry = _FileEntry(path=entry) if isinstance(entry, str) else entry
        where = path.parent / entry.path
        location = where if where.exists() else Path(entry.path)  # else a name under reference/
        spec = _spec(location)
        size = entry.size or data.size
        if size is not None and not spec.has_size(size):
            raise SuiteError(f"suite file {path}: problem {spec.name!r} has no size {size!r} "
                             f"(its sizes: {', '.join(spec.sizes)})")
        level = str(entry.level) if entry.level is not None else level_of(spec.location.parent if spec.spec_file is None
                                                                           else spec.folder.parent)
        problems.append(SuiteProblem(name=spec.name, location=str(spec.location), size=size, level=level,
                                     backend=entry.backend, precision=entry.precision))
    return _checked(Suite(name=data.name or path.stem, source=str(path), tier=data.tier, problems=problems))


def _checked(suite: Suite) -> Suite:
    seen: dict[str, str] = {}
    for p in suite.problems:
        if p.name in seen:
            raise SuiteError(f"suite {suite.name}: two problems are named {p.name!r} ({seen[p.name]} and "
                             f"{p.location}); a suite names each problem once")
        seen[p.name] = p.location
    from harness.core.ranking import TIERS

    if suite.tier not in TIERS:
        raise SuiteError(f"suite {suite.name}: tier must be one of {', '.join(TIERS)}, not {suite.tier!r}")
    return suite


def suite_of(locations: Sequence[str]) -> Suite:
    """A suite of the problems given one by one (`--problem A --problem B`)."""
    problems = [SuiteProblem(name=spec.name, location=str(spec.location)) for spec in map(_spec, locations)]
    return _checked(Suite(name="+".join(p.name for p in problems), source="--problem", problems=problems))


def check_sizes(suite: Suite, size: str | None, device: str) -> dict[str, str]:
    """The size each problem will be judged at (its own, `size`, or its default on `device`), by name; every
    problem that lacks its size said before any work (SuiteError)."""
    wrong, sizes = [], {}
    for p in suite.problems:
        spec = load_problem(p.location)
        sizes[p.name] = p.size or size or spec.default_size_for(device)
        if not spec.has_size(sizes[p.name]):
            wrong.append(f"{p.name} has no size {sizes[p.name]!r} (its sizes: {', '.join(spec.sizes)})")
    if wrong:
        raise SuiteError("; ".join(wrong))
    return sizes


def assign_candidates(suite: Suite, files: Sequence[Path],
                      named: Sequence[Path] = ()) -> tuple[dict[str, list[Path]], list[Path]]:
    """Each candidate file's problem, from its path from what the user named (`named`: the folders given on the
    command line, their own names included; a file given itself counts by its path as given, never resolved, nor any
    folder above what was named): the nearest folder named as a
    problem (`out/1_ReLU/a.py`; a suite run's folder `candidates/1_ReLU-.../0/candidate.py`), else the problem its
    file name starts with (`1_ReLU_sample_0.py`, KernelBench's generations named by problem). A folder or file name
    that two problems match is an error naming both (SuiteError). Returns the files by problem name, in the suite's
    order, and those that belong to none."""
    names = suite.names()
    by_problem: dict[str, list[Path]] = {name: [] for name in names}
    unassigned = []
    roots = [r.resolve() for r in named if r.is_dir()]
    for file in files:
        resolved = file.resolve()
        below = max((r for r in roots if resolved.is_relative_to(r)), key=lambda r: len(r.parts), default=None)
        parts = resolved.relative_to(below.parent).parts if below is not None else file.parts  # the folder's own name too
        match = kernelbench_problem(suite, file.name)
        for folder in reversed(parts[:-1]) if match is None else ():  # the nearest folder first
            if found := [n for n in names if folder == n or folder.startswith(n + "-")]:
                match = _one(found, file, f"folder {folder!r}")
                break
        if match is None and (found := [n for n in names if re.match(rf"{re.escape(n)}(\b|_|-|\.)", file.name)]):
            match = _one(found, file, "its file name")
        if match is None:
            unassigned.append(file)
        else:
            by_problem[match].append(file)
    return {n: fs for n, fs in by_problem.items() if fs}, unassigned


# KernelBench's generations (scripts/generate_samples.py): runs/<run>/level_{L}_problem_{ID}_sample_{S}_kernel.py
KERNELBENCH_SAMPLE = re.compile(r"level_(\w+?)_problem_(\d+)_sample_(\d+)_kernel\.py")


def kernelbench_sample(name: str) -> tuple[str, int, int] | None:
    """(level, problem id, sample id) of a file KernelBench's generation wrote; None for any other name."""
    match = KERNELBENCH_SAMPLE.fullmatch(name)
    return (match.group(1), int(match.group(2)), int(match.group(3))) if match else None


def kernelbench_problem(suite: Suite, name: str) -> str | None:
    """The suite's problem of a KernelBench sample file (`level_1_problem_19_sample_0_kernel.py`: the problem of
    level 1 whose name starts with `19_`); None for another name; SuiteError where the suite has no such problem,
    or more than one, saying which."""
    sample = kernelbench_sample(name)
    if sample is None:
        return None
    level, number, _ = sample
    found = [p.name for p in suite.problems if p.name.split("_", 1)[0] == str(number) and (p.level == level or (
        p.level is None and len({q.level for q in suite.problems}) == 1))]
    if len(found) != 1:
        levels = sorted({str(p.level) for p in suite.problems})
        what = "no problem" if not found else f"problems {' and '.join(map(repr, found))}"
        raise SuiteError(f"{name}: KernelBench's sample of level {level}, problem {number}: suite {suite.name} has "
                         f"{what} of level {level} named {number}_... (its levels: {', '.join(levels)}; give "
                         "--problems the KernelBench folder holding level{L}/, or the level's own folder)")
    return found[0]


def _one(found: list[str], file: Path, where: str) -> str:
    """The one problem `where` names; SuiteError where it names several."""
    if len(found) > 1:
        raise SuiteError(f"{file}: {where} matches problems {' and '.join(map(repr, found))}: rename it or put it in a "
                         "folder named as one problem")
    return found[0]
