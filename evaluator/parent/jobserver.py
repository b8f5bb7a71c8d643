"""One budget of compiler jobs for every build in flight: a GNU make jobserver (a FIFO holding one byte
per free job) that ninja 1.13 and later take part in, as torch runs it (no `-j` when MAX_JOBS is unset,
MAKEFLAGS naming the FIFO). Each ninja runs one job without a token and takes a token for each more,
so the parent takes one token for each build it starts (`begin`) and gives it back as the build ends
(`end`): however many builds are in flight, at most `slots` compilers run, and two builds waiting on
16 cores each get every compiler they can use.

A build's executor is a candidate's process: it may keep tokens (killed mid-build, or on purpose) or
add some. Whenever no build is in flight the FIFO is emptied and filled again, so neither lasts.
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

from evaluator.wire.identity import usable_cores

NINJA_WITH_JOBSERVER = (1, 13)  # the first ninja that reads a jobserver from MAKEFLAGS


@functools.cache
def ninja_takes_jobserver() -> bool:
    """Whether the `ninja` torch runs (the first on PATH) is a jobserver client."""
    ninja = shutil.which("ninja")
    if ninja is None:
        return False
    try:
        version = subprocess.run([ninja, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return False
    found = re.match(r"\s*(\d+)\.(\d+)", version)
    return bool(found) and (int(found[1]), int(found[2])) >= NINJA_WITH_JOBSERVER


class JobServer:
    """`slots` compiler jobs shared by the builds started between `begin` and `end`; `makeflags` is
    what a build's environment holds as MAKEFLAGS, `fifo` the one file its executor must open."""

    def __init__(self, slots: int):
        self.slots = max(1, slots)
        self.folder = Path(tempfile.mkdtemp(prefix="kh-jobs-"))  # 0700: only this user's executors reach it
        self.fifo = self.folder / "jobs"
        os.mkfifo(self.fifo, 0o600)
        # Held open for reading and writing, so that an executor's open never waits for a peer and the
        # tokens outlive every build.
        self.fd = os.open(self.fifo, os.O_RDWR | os.O_NONBLOCK)
        self.lock = threading.Lock()
        self.in_flight = 0
        self.owed = 0  # tokens a started build should have taken but found none (given back by not writing)
        self._refill()

    @property
    def makeflags(self) -> str:
        return f"-j{self.slots} --jobserver-auth=fifo:{self.fifo}"

    def begin(self) -> int:
        """A build starts: its ninja's first job needs no token, so one is taken out of the budget. Returns
        how many builds were in flight before it."""
        with self.lock:
            ahead = self.in_flight
            self.in_flight += 1
            if not self._take():
                self.owed += 1
            return ahead

    def end(self) -> None:
        with self.lock:
            self.in_flight = max(0, self.in_flight - 1)
            if self.in_flight == 0:
                self._refill()  # nothing in flight: tokens kept or added by a build are forgotten
            elif self.owed:
                self.owed -= 1
            else:
                self._give()

    def tokens(self) -> int:
        """Tokens in the FIFO now (read back at once: for tests and the profile)."""
        with self.lock:
            count = self._drain()
            self._give(count)
            return count

    def close(self) -> None:
        try:
            os.close(self.fd)
        except OSError:
            pass
        shutil.rmtree(self.folder, ignore_errors=True)

    def _take(self) -> bool:
        try:
            return len(os.read(self.fd, 1)) == 1
        except BlockingIOError:
            return False

    def _give(self, count: int = 1) -> None:
        if count > 0:
            try:
                os.write(self.fd, b"+" * count)
            except BlockingIOError:  # a full pipe (a candidate wrote 64 KiB of tokens): the next refill mends it
                pass

    def _drain(self) -> int:
        count = 0
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except BlockingIOError:
                return count
            if not chunk:
                return count
            count += len(chunk)

    def _refill(self) -> None:
        self._drain()
        self.owed = 0
        self._give(self.slots)


def default_build_jobs(device: str) -> int:
    """Builds at once. On a GPU: one per core (their compilers share one budget of that many jobs,
    evaluator.parent.jobserver), at most one per 4 GiB of memory (an executor and the compilers of torch's
    headers, 1.5-2.2 GiB each) and 32. On the CPU, where the cores also run the candidates being judged:
    half the cores, at most 8."""
    cores = usable_cores()
    if device != "cuda":
        return max(1, min(8, cores // 2))
    try:
        memory_gib = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 2**30
    except (OSError, ValueError):
        memory_gib = 4.0 * cores
    return max(1, min(cores, int(memory_gib // 4), 32))


def build_slots(device: str) -> int:
    """Compiler jobs shared by the builds of a batch. On a GPU machine twice the cores: a build's binding and
    CUDA sources compile side by side, and the builds' niceness (BUILD_NICE, plus one per build ahead of it)
    has the kernel run the compilers of the builds the lanes need first, so that those finish first
    rather than all together (measured on an H100 machine, 16 cores: see the README's "Throughput"). On
    the CPU half the cores (the other half judge)."""
    if os.environ.get("HARNESS_BUILD_SLOTS", "").isdigit():  # a machine of another shape: set it yourself
        return max(1, int(os.environ["HARNESS_BUILD_SLOTS"]))
    cores = usable_cores()
    return 2 * cores if device == "cuda" else max(1, cores // 2)
