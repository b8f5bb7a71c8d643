"""Build folders carried between machines (`--executor ray`): a folder packed where it was built and
unpacked, under the same name, into the build cache of the machine that judges the candidate.

A build folder is named by the toolchain and the source (evaluator.referee.environment.build_folder),
so the name says what it holds: a machine whose toolchain differs never takes one (its executor builds
the candidate itself), and a folder already there is left alone. What is packed was written by the
candidate's contained build, so it is unpacked with tarfile's `data` filter (no absolute paths, no
link or file outside the folder, no devices) and never larger than MAX_ARTIFACT_BYTES.
"""

from __future__ import annotations

import io
import os
import secrets
import socket
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from evaluator.wire.folders import remove_tree

# A CUDA extension's folder (objects, library, ninja's logs) is a few MB; a folder beyond this is not carried.
MAX_ARTIFACT_BYTES = 512 << 20


@dataclass
class Artifact:
    """One build folder, packed."""

    folder: str     # its place in the build cache: extensions/<toolchain>/<source>
    data: bytes     # a tar of its contents
    built_on: str   # where it was built (evaluator.parent.artifacts.place)


def place() -> str:
    """This machine's name, and under Ray its node's ID: what a verdict says it was built or judged on."""
    host = socket.gethostname()
    ray = sys.modules.get("ray")  # never imported here: a local batch would pay its import and its changes to os.environ
    if ray is not None and ray.is_initialized():
        return f"{host} (ray node {ray.get_runtime_context().get_node_id()[:16]})"
    return host


def pack(cache_dir: Path, folder: Path) -> Artifact | None:
    """The folder (inside `cache_dir`) as an Artifact, or None when it is missing, too large or cannot be
    read (the judging machine's executor then builds the candidate itself)."""
    if not folder.is_dir() or folder.is_symlink():
        return None
    try:
        size = 0
        for root, _, files in os.walk(folder):  # links to folders are not followed
            size += sum(os.lstat(os.path.join(root, name)).st_size for name in files)
            if size > MAX_ARTIFACT_BYTES:
                return None
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w") as tar:
            for path in sorted(folder.iterdir()):
                tar.add(path, arcname=path.name)  # links stay links (the `data` filter judges them on unpacking)
    except (OSError, tarfile.TarError):
        return None
    return Artifact(folder=str(folder.relative_to(cache_dir)), data=buffer.getvalue(), built_on=place())


def install(cache_dir: Path, artifact: Artifact, wanted: Path) -> bool:
    """Unpack into `wanted` (this machine's build folder for the candidate) when the artifact was built
    for that very folder (same toolchain, same source) and no folder is there yet. False when nothing was
    unpacked (there already, another toolchain's, or refused: the executor then builds it itself)."""
    target = cache_dir / artifact.folder
    if target != wanted or target.exists():
        return False
    staging = target.with_name(f".{target.name}.{secrets.token_hex(4)}")
    try:
        staging.mkdir(parents=True)
        with tarfile.open(fileobj=io.BytesIO(artifact.data), mode="r") as tar:
            tar.extractall(staging, filter="data")
        os.rename(staging, target)  # whole or not at all; another unpacking of the same folder may win
        return True
    except (OSError, tarfile.TarError):
        return False
    finally:
        remove_tree(staging)
