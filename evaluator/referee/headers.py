"""Precompiled torch headers for the binding translation unit of a candidate's extension.

`load_inline` writes a `main.cpp` that starts with `#include <torch/extension.h>`; parsing those
headers is most of its compile (24.9 s of 25.7 on 2 cores, here). GCC looks for `<header>.gch` in each
include folder before the header itself, and takes any valid precompiled header among the files of a
`torch/extension.h.gch/` folder. So the harness keeps such a folder per toolchain in its own cache
(never in torch's folders), one file per set of compiler flags, and an executor's environment names
its parent in CPATH: searched as `-I` folders are, after those on the command line and before torch's
`-isystem` ones. A header that does not match the compile's flags exactly (macros, `-O`, `-std`, ...)
is skipped by GCC and the header is read as text; the object file made with one is byte-identical
to the one made without (checked in tests/test_headers.py).

Only the parent builds them (`build`), from torch's own header and the flags torch would use, with
flag sets taken from candidates' literal `extra_cflags` lists and only from a short list of
options: no candidate writes one, and no candidate's text reaches a compiler outside its executor.
A candidate that names `extra_include_paths` gets none (its folders come first and could shadow a
header the precompiled one already holds).
"""

from __future__ import annotations

import ast
import fcntl
import functools
import inspect
import os
import re
import shlex
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from evaluator.wire import syntax
from evaluator.referee.environment import toolchain_digest
from evaluator.wire.records import json_digest

# The options a flag set may hold to be precompiled (what candidates ask for: `-O3`, `-O2`, ...).
FLAG_TOKEN = re.compile(r"-(O[0-3s]?|DNDEBUG|std=c\+\+(14|17|20|23)|ffast-math|funroll-loops|w|Wall|Wextra|fopenmp)")
MOST_SETS = 4  # per toolchain and kind (each is about 0.75 GB); the oldest goes to make room
DISABLE_ENV = "KERNELHARNESS_PCH"  # "0": none built (an executor still uses those already there)


def headers_root(cache_dir: Path, device: str, cuda: bool) -> Path:
    """The folder CPATH names: it holds `torch/extension.h.gch/<flags>` (a CUDA extension's `main.cpp`
    sees CUDA's headers too, so it gets a folder of its own)."""
    return cache_dir / "headers" / toolchain_digest(device) / ("cuda" if cuda else "cpp")


def headers_for(cache_dir: Path, device: str, source: str) -> Path | None:
    """The folder an executor of this candidate is given in CPATH, or None."""
    if "extra_include_paths" in source:
        return None
    root = headers_root(cache_dir, device, uses_cuda(source))
    folder = root / "torch" / "extension.h.gch"
    linked = (root / "torch" / "extension.h").exists()
    return root if linked and folder.is_dir() and any(folder.iterdir()) else None


def torch_header() -> Path:
    from torch.utils import cpp_extension

    return Path(cpp_extension.__file__).resolve().parents[1] / "include" / "torch" / "extension.h"


def share_headers(cache_dir: Path, shared_cache: Path) -> None:
    """`cache_dir` (a fresh build cache) given the headers of `shared_cache`: they belong to the toolchain,
    not to a candidate, so a cache made to build every candidate anew need not make them again."""
    shared = shared_cache / "headers"
    shared.mkdir(parents=True, exist_ok=True)
    cache_dir.mkdir(parents=True, exist_ok=True)
    link = cache_dir / "headers"
    if not (link.is_symlink() and link.resolve() == shared.resolve()):  # a kept cache may hold it already
        link.symlink_to(shared, target_is_directory=True)


def link_header(root: Path) -> None:
    """`<root>/torch/extension.h`, a link to torch's own. GCC takes a header found through a precompiled one
    to live where that was found: a second `#include <torch/extension.h>` (load_inline writes one, and most
    candidates one more) looks for it there, and without it the compile stops ("No such file")."""
    header = torch_header()
    link = root / "torch" / "extension.h"
    if link.is_symlink() and os.readlink(link) == str(header):
        return
    link.parent.mkdir(parents=True, exist_ok=True)
    partial = link.with_name(f".extension.h.{os.getpid()}")
    partial.unlink(missing_ok=True)
    partial.symlink_to(header)
    os.replace(partial, link)


NOT_BUILT = ("not built: this torch has no CUDA (a CPU build of torch cannot build CUDA extensions); a CUDA "
             "build of torch builds it, and a GPU runs it")


def torch_builds_cuda() -> bool:
    """Whether this torch can build a CUDA extension at all: a CPU build has no CUDA libraries to link."""
    import torch

    return torch.version.cuda is not None


def builds_cuda(source: str) -> bool:
    """Whether a candidate passes non-empty `cuda_sources` to a call (load_inline's): it cannot be built without
    CUDA. Read from the syntax tree, not the text: a comment naming them makes no CPU candidate `not_built` (which
    the boards leave out of the failures)."""
    try:
        tree = syntax.parse(source)
    except (SyntaxError, ValueError):  # NUL bytes, nested too deep (syntax.TooDeep)
        return False

    def given(value: ast.AST) -> bool:  # anything but None, "", [] or ()
        return not ((isinstance(value, ast.Constant) and not value.value)
                    or (isinstance(value, (ast.List, ast.Tuple)) and not value.elts))

    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if any(k.arg == "cuda_sources" and given(k.value) for k in node.keywords):
                return True
            if name == "load_inline" and len(node.args) >= 3 and given(node.args[2]):  # (name, cpp, cuda, ...)
                return True
    return False


def uses_cuda(source: str) -> bool:
    """Whether a candidate carries CUDA code (which cannot run without a GPU, and whose binding sees CUDA's
    headers)."""
    return "cuda_sources" in source or "__global__" in source


def flag_sets(source: str) -> set[tuple[str, ...]]:
    """The `extra_cflags` a candidate gives `load_inline` (literal lists only; none given: the empty set),
    each kept only when every option in it is one FLAG_TOKEN allows."""
    try:
        tree = syntax.parse(source)
    except (SyntaxError, ValueError):  # NUL bytes, nested too deep (syntax.TooDeep)
        return set()
    found: set[tuple[str, ...]] = set()
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _called(node) in ("load_inline", "load")):
            continue
        given = next((k.value for k in node.keywords if k.arg == "extra_cflags"), None)
        if given is None:
            found.add(())
        elif isinstance(given, (ast.List, ast.Tuple)) and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in given.elts):
            flags = tuple(e.value.strip() for e in given.elts)
            if all(FLAG_TOKEN.fullmatch(f) for f in flags):
                found.add(flags)
    return found


def _called(call: ast.Call) -> str:
    func = call.func
    return func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""


def missing(cache_dir: Path, device: str, sources: list[str]) -> list[tuple[tuple[str, ...], bool]]:
    """(flags, cuda) pairs asked for by at least two of these candidates and not yet built: the first
    build of a set costs about as much as three builds save."""
    if os.environ.get(DISABLE_ENV) == "0":
        return []
    counts: dict[tuple[tuple[str, ...], bool], int] = {}
    for source in sources:
        if "extra_include_paths" in source:
            continue
        for flags in flag_sets(source):
            key = (flags, uses_cuda(source))
            counts[key] = counts.get(key, 0) + 1
    wanted = []
    for (flags, cuda), count in sorted(counts.items(), key=lambda item: -item[1]):
        folder = headers_root(cache_dir, device, cuda) / "torch" / "extension.h.gch"
        if count >= 2 and not (folder / _name(flags, cuda)).exists():
            wanted.append((flags, cuda))
    return wanted


def _name(flags: tuple[str, ...], cuda: bool) -> str:
    """A header's file name: the digest of the command that makes it (so a change of torch's flags, or
    of how they are read here, makes a new one)."""
    return json_digest(_command(flags, cuda) or [])[:16]


def build(cache_dir: Path, device: str, flags: tuple[str, ...], cuda: bool, nice: int = 0,
          started: Callable[[subprocess.Popen], None] = lambda proc: None) -> Path | None:
    """Precompile torch/extension.h with the flags torch would compile a `main.cpp` with (`flags` as its
    `extra_cflags`); the file, or None when it cannot be made (it is only ever a speed-up)."""
    root = headers_root(cache_dir, device, cuda)
    target = root / "torch" / "extension.h.gch" / _name(flags, cuda)
    work = root.parent / ".building"
    work.mkdir(parents=True, exist_ok=True)
    with open(work / f"{target.name}-{'cuda' if cuda else 'cpp'}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another batch building the same one: wait, then find it made
        link_header(root)  # before any header is there: a folder with one always has it
        if target.exists():
            return target
        command = _command(flags, cuda)
        if command is None:
            return None
        if nice and shutil.which("nice"):
            command = ["nice", "-n", str(nice), *command]
        partial = Path(tempfile.mkstemp(dir=work, suffix=".gch")[1])
        try:
            proc = subprocess.Popen([*command, "-o", str(partial)], stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            started(proc)
            if proc.wait(timeout=900) != 0:
                raise OSError(f"the compiler exited with {proc.returncode}")
            target.parent.mkdir(parents=True, exist_ok=True)
            _make_room(target.parent, work)
            os.replace(partial, target)  # whole or absent: a compile never sees half of one
        except (OSError, subprocess.SubprocessError):
            partial.unlink(missing_ok=True)
            return None
    return target


def _make_room(folder: Path, work: Path) -> None:
    """At most MOST_SETS headers per folder: the oldest go (moved out first, so that a compile listing the
    folder finds either the whole file or none)."""
    headers = sorted(folder.iterdir(), key=lambda p: p.stat().st_mtime)
    for old in headers[:max(0, len(headers) - MOST_SETS + 1)]:
        moved = work / f"{old.name}.old"
        try:
            os.replace(old, moved)
            moved.unlink()
        except OSError:
            pass


class HeaderBuilds:
    """A batch's missing headers (`missing`), built one after another in the background while its
    candidates build (each taking a job of the builds' budget, when there is one); builds that start
    after one is made use it. `stop` ends the one under way (the batch is over)."""

    def __init__(self, cache_dir: Path, device: str, wanted: list[tuple[tuple[str, ...], bool]], nice: int = 0,
                 jobserver=None):
        self.proc: subprocess.Popen | None = None
        self.stopped = False
        self.thread = threading.Thread(target=self._run, args=(cache_dir, device, wanted, nice, jobserver),
                                       daemon=True)
        self.thread.start()

    def _run(self, cache_dir, device, wanted, nice, jobserver) -> None:
        for flags, cuda in wanted:
            if self.stopped:
                return
            if jobserver is not None:
                jobserver.begin()
            try:
                build(cache_dir, device, flags, cuda, nice, started=self._started)
            finally:
                if jobserver is not None:
                    jobserver.end()

    def _started(self, proc: subprocess.Popen) -> None:
        self.proc = proc
        if self.stopped:
            proc.kill()

    def stop(self) -> None:
        self.stopped = True
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
        self.thread.join(timeout=30)


@functools.lru_cache(maxsize=32)
def _command(flags: tuple[str, ...], cuda: bool) -> list[str] | None:
    """The compiler and flags of torch's own ninja file for such an extension's `main.cpp`, compiling the
    header instead (None where this torch's private writer is not the one read here)."""
    from torch.utils import cpp_extension

    writer = getattr(cpp_extension, "_write_ninja_file_to_build_library", None)
    if writer is None:
        return None
    folder = Path(tempfile.mkdtemp(prefix="kh-headers-"))
    try:
        # an `-arch` of its own keeps torch from asking for a GPU's (it goes to nvcc's flags, not main.cpp's)
        arguments = dict(path=str(folder / "build.ninja"), name="kh_headers", sources=[str(folder / "main.cpp")],
                         extra_cflags=list(flags), extra_cuda_cflags=["-arch=sm_90"] if cuda else [],
                         extra_sycl_cflags=[], extra_ldflags=[],
                         extra_include_paths=[], with_cuda=cuda, with_sycl=False, is_standalone=False)
        parameters = inspect.signature(writer).parameters
        if any(p not in arguments for p in parameters):
            return None
        writer(**{p: arguments[p] for p in parameters})
        text = (folder / "build.ninja").read_text()
    except Exception:
        return None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    values = dict(re.findall(r"^(cxx|cflags) = (.*)$", text, flags=re.M))
    if "cxx" not in values or "cflags" not in values:
        return None
    cflags = [f for f in shlex.split(values["cflags"]) if not f.startswith("-DTORCH_EXTENSION_NAME=")]
    header = torch_header()
    return [*shlex.split(values["cxx"]), "-x", "c++-header", str(header), *cflags]
