"""Shared test setup.

Isolation: no test writes into the checkout or the user's own caches and settings.
- One build cache shared by every test session of this user (`HARNESS_CACHE_DIR`): by default
  `kernelharness-test-builds-<uid>` in the temporary folder, apart from the checkout and from the
  user's own ~/.cache/kernelharness; `KERNELHARNESS_TEST_CACHE_DIR` names another (.ci/gpu
  prebuilds every CUDA source into one in parallel before the tests). Builds in it are keyed by
  source and toolchain (evaluator.referee.environment.build_folder), so an unchanged extension is
  built once, not once per session, and another torch or compiler never reuses it.
- Settings that point the harness at a developer's own store, config, run folder or endpoint
  (`HARNESS_STORE`, `OPENAI_API_KEY`, ...) are unset for the session.
- Every test (and every module or session fixture) runs in a fresh temporary working folder,
  so the defaults relative to it (`.harness/logs`, `.harness/results.sqlite`, `candidates/<run>`,
  `harness.toml`, `report.html`, `bench.json`) land there. Subprocesses still import this
  checkout: its root is put first on PYTHONPATH.

Guard: when the tests run from a git checkout, the session FAILS if the checkout gained or changed
files while they ran (`git status --porcelain --ignored --untracked-files=all`, plus each listed
file's size and mtime, before and after). Python's and pytest's own caches (`__pycache__/`,
`.pytest_cache/`) are not counted.
"""

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = Path(__file__).parent / "fixtures"

# -- the CPU fixtures judged once for the session ---------------------------------------------------------------

CPU = FIXTURES / "candidates" / "cpu"
GOOD = CPU / "torch_ops_correct.py"
BAD_INPUTS = sorted(p for p in CPU.glob("*.py") if p != GOOD)


def cpu_options(tmp_path: Path, **overrides):
    from evaluator.parent.sandbox import EvalOptions

    # 60 s: print_100mb's timed calls (plus the unwritten-output call and the buffer replay) ran past 30 s on a
    # loaded 2-core machine
    settings = dict(device="cpu", size="small", run_timeout_s=60, timing_budget_s=0.2, baselines=["eager"],
                    log_root=tmp_path / "logs")
    settings.update(overrides)
    return EvalOptions(**settings)


@pytest.fixture(scope="session")
def bad_input_verdicts(tmp_path_factory):
    """Every CPU fixture followed by the good candidate, in ONE evaluation batch (builds in parallel, executors
    started two ahead). With --run-rejected: the os._exit fixtures, which the static checks reject, are here to
    crash the worker. Session-wide: test_evaluator reads each verdict, test_ray_lanes compares a Ray cluster's
    verdicts of the same files with them."""
    from evaluator.parent.sandbox import CandidateFile, evaluate

    tmp = tmp_path_factory.mktemp("bad")
    judged = {}
    # a candidate that never returns runs to its limit: it gets a batch of its own with a short one (the others'
    # limit is long enough for a loaded machine; the good candidate after it needs 1.5-2.5 s of it on 2 cores), so
    # the suite does not wait a minute on it
    for inputs, run_timeout_s in (([p for p in BAD_INPUTS if p.stem != "infinite_loop"], 60),
                                  ([p for p in BAD_INPUTS if p.stem == "infinite_loop"], 10)):
        batch = []
        for path in inputs:
            batch += [CandidateFile(name=path.stem, path=path), CandidateFile(name=f"after-{path.stem}", path=GOOD)]
        verdicts = list(evaluate(batch, cpu_options(tmp, jobs=2, ahead=2, run_rejected=True, run_timeout_s=run_timeout_s)))
        assert [v.candidate for v in verdicts] == [c.name for c in batch]
        judged.update({v.candidate: v for v in verdicts})
    return judged



# Environment settings that would send the tests to a developer's own files or model endpoint.
USER_SETTINGS = ("HARNESS_STORE", "HARNESS_CONFIG", "HARNESS_RUNS_DIR", "HARNESS_MODEL", "OPENAI_BASE_URL",
                 "OPENAI_API_KEY", "HARNESS_TIMING_BUDGET_S", "HARNESS_EAGER_AS_CANDIDATE")
# Written by Python and pytest themselves whatever the tests do (and ignored by .gitignore).
TOOL_CACHES = ("__pycache__", ".pytest_cache")


def cuda_visible() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:
        return False


# Module fixtures that evaluate a batch of candidates for real (builds, checks, timing: up to minutes
# on 2 cores): every test using one is `slow`, like every `gpu` test (each builds CUDA code).
SLOW_FIXTURES = {"bad_input_verdicts", "cpu_verdicts", "gpu_verdicts", "built", "report"}


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by mark
def pytest_collection_modifyitems(config, items):
    for item in items:
        if "gpu" in item.keywords or SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
        # Under pytest-xdist (`-n 2 --dist loadgroup`): a module's tests on one worker, so a module fixture is
        # made once; the session's judged CPU fixtures too (test_evaluator and test_ray_lanes read them).
        shared = "bad_input_verdicts" in getattr(item, "fixturenames", ())
        item.add_marker(pytest.mark.xdist_group("bad_input_verdicts" if shared else getattr(item.module, "__name__", "")))
    if cuda_visible():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU (none visible)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def expectation(path: Path) -> dict[str, str]:
    """The `EXPECT: status=... flag=...` line of a fixture's docstring."""
    match = re.search(r"^EXPECT:(.*)$", path.read_text(), re.MULTILINE)
    assert match, f"{path} has no EXPECT line"
    return dict(part.split("=", 1) for part in match.group(1).replace('"""', " ").split())


# -- isolation ----------------------------------------------------------------------------------

_SESSION_ENV = pytest.MonkeyPatch()
_session_folder = pytest.StashKey[Path]()
_checkout_before = pytest.StashKey["dict | None"]()
_checkout_changes = pytest.StashKey[list]()


def shared_build_cache(session_folder: Path) -> str:
    """The build cache every test session of this user shares: a folder of the user's own (0700) in the
    temporary folder; if that name is taken by anything else, this session's own."""
    shared = Path(tempfile.gettempdir()) / f"kernelharness-test-builds-{os.getuid()}"
    try:
        shared.mkdir(mode=0o700, exist_ok=True)
        info = shared.lstat()
        if shared.is_symlink() or info.st_uid != os.getuid() or info.st_mode & 0o077:
            raise PermissionError(f"{shared} is not this user's private folder")
        return str(shared)
    except OSError:
        return str(session_folder / "build-cache")


def pytest_configure(config):
    """Set before collection, so that modules imported while collecting see it too."""
    folder = Path(tempfile.mkdtemp(prefix="kernelharness-tests-"))
    config.stash[_session_folder] = folder
    cache = os.environ.get("KERNELHARNESS_TEST_CACHE_DIR") or shared_build_cache(folder)
    _SESSION_ENV.setenv("HARNESS_CACHE_DIR", cache)
    # matplotlib's font list, made once (0.5 s) and kept with the builds, never in the user's own ~/.cache/matplotlib
    _SESSION_ENV.setenv("MPLCONFIGDIR", str(Path(cache) / "matplotlib"))
    # no batch precompiles torch's headers (0.8 GB and a minute of a core each); tests/test_headers.py does
    _SESSION_ENV.setenv("KERNELHARNESS_PCH", "0")
    for name in USER_SETTINGS:
        _SESSION_ENV.delenv(name, raising=False)
    # Without a GPU, candidates judged through the CLI time 0.2 s of calls, as the tests' own options do (2 s, the
    # default, cost each one 4-6 s of a 2-core machine); with one, the GPU tests' runs keep the default.
    # and eager is the referee's own loop, not the reference judged as a candidate each round (a candidate's time a
    # round: the whole suite 679 s with it, 613-640 without, on 2 cores): the tests of the twin ask for it
    if not cuda_visible():
        _SESSION_ENV.setenv("HARNESS_TIMING_BUDGET_S", "0.2")
        _SESSION_ENV.setenv("HARNESS_EAGER_AS_CANDIDATE", "0")
    # The terminal's width is the tests' to set (pytest-xdist's workers are given COLUMNS=80, and so is a
    # developer's shell now and then): the CLI's tables are as wide as a pipe gets without it.
    _SESSION_ENV.delenv("COLUMNS", raising=False)
    python_path = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    _SESSION_ENV.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), *python_path]))
    config.stash[_checkout_before] = checkout_state(ROOT)


def pytest_unconfigure(config):
    _SESSION_ENV.undo()
    folder = config.stash.get(_session_folder, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def session_workdir(tmp_path_factory):
    """Module and session fixtures run in a temporary folder too, never in the checkout."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(tmp_path_factory.mktemp("session-cwd"))
        yield


@pytest.fixture(autouse=True)
def isolated_workdir(session_workdir, tmp_path_factory, monkeypatch):
    """Each test starts in its own empty working folder (not its tmp_path, which it owns)."""
    folder = tmp_path_factory.mktemp("cwd")
    monkeypatch.chdir(folder)
    return folder



def calls_drawn(check) -> int:
    """How many clocked calls the sampled replay compares for a verdict's `timing_check` (evaluator.referee.replay):
    SAMPLED_CALLS of the ranked calls, SAMPLED_OTHERS of the rest but the last (warm-up and back-to-back windows: the
    last call is a back-to-back window's), and the last; every call of a part that has no more."""
    from evaluator.referee.replay import SAMPLED_CALLS, SAMPLED_OTHERS

    others = check.clocked_calls - check.calls - 1
    return min(check.calls, SAMPLED_CALLS) + min(others, SAMPLED_OTHERS) + 1

# -- the guard ----------------------------------------------------------------------------------

def checkout_state(root: Path) -> dict[str, tuple[str, tuple[int, int] | None]] | None:
    """path -> (git status code, (size, mtime_ns)) for every untracked, ignored or changed file of
    the git checkout at `root`; None when `root` is not the top of a git checkout."""
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=root, capture_output=True, text=True,
                             timeout=60)
        if top.returncode != 0 or Path(top.stdout.strip()).resolve() != root:
            return None
        status = subprocess.run(["git", "status", "--porcelain=v1", "-z", "--ignored", "--untracked-files=all"],
                                cwd=root, capture_output=True, check=True, timeout=120).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    # git lists no empty folder: the top level's entries are compared too (e.g. a new `.benchmarks/`)
    state = {f"{entry.name}/" if entry.is_dir() else entry.name: ("top", None) for entry in os.scandir(root)
             if entry.name not in TOOL_CACHES}
    records = iter(status.decode("utf-8", "surrogateescape").split("\0"))
    for record in records:
        if not record:
            continue
        code, path = record[:2], record[3:]
        if code[0] in "RC":
            next(records, None)  # a rename's or copy's source path follows
        if any(part in TOOL_CACHES for part in Path(path).parts):
            continue
        try:
            st = (root / path).stat()
            signature = (st.st_size, st.st_mtime_ns)
        except OSError:
            signature = None
        state[path] = (code, signature)
    return state


def checkout_changes(before: dict, after: dict) -> list[str]:
    changes = []
    for path in sorted(set(before) | set(after)):
        if path not in before:
            changes.append(f"new     {after[path][0]} {path}")
        elif path not in after:
            changes.append(f"cleaned {before[path][0]} {path}")
        elif before[path] != after[path]:
            changes.append(f"changed {after[path][0]} {path}")
    return changes


def pytest_sessionfinish(session, exitstatus):
    before = session.config.stash.get(_checkout_before, None)
    if before is None:
        return
    changes = checkout_changes(before, checkout_state(ROOT) or {})
    if changes:
        session.config.stash[_checkout_changes] = changes
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if session.config.pluginmanager.get_plugin("terminalreporter") is None:
            print("\n".join(guard_report(changes)))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    changes = config.stash.get(_checkout_changes, None)
    if changes:
        terminalreporter.write_sep("=", "checkout guard FAILED", red=True, bold=True)
        for line in guard_report(changes):
            terminalreporter.write_line(line, red=True)


def guard_report(changes: list[str]) -> list[str]:
    lines = [f"the tests wrote into the checkout {ROOT} (they must write only to temporary folders):",
             *(f"  {c}" for c in changes[:50])]
    if len(changes) > 50:
        lines.append(f"  ... and {len(changes) - 50} more")
    return lines
