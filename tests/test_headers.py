"""Precompiled torch headers (evaluator.referee.headers): which flag sets are precompiled, and that a
build given one makes the same object, faster, inside its executor."""

import os
import secrets
import shlex
import subprocess

import pytest

from evaluator.parent.sandbox import CandidateFile, EvalOptions, Evaluator, default_cache_dir
from evaluator.referee import headers
from evaluator.wire.records import json_digest


def test_only_literal_flag_sets_of_plain_options_are_precompiled():
    source = '''
from torch.utils.cpp_extension import load_inline
import torch.utils.cpp_extension as ce
a = load_inline(name="a", cpp_sources="", extra_cflags=["-O3"])
b = ce.load_inline(name="b", cpp_sources="")
c = load_inline(name="c", cpp_sources="", extra_cflags=["-O2", "-DNDEBUG"])
d = load_inline(name="d", cpp_sources="", extra_cflags=["-fplugin=/tmp/x.so"])
e = load_inline(name="e", cpp_sources="", extra_cflags=FLAGS)
f = load_inline(name="f", cpp_sources="", extra_cflags=["-O3", "-include/etc/passwd"])
'''
    assert headers.flag_sets(source) == {("-O3",), (), ("-O2", "-DNDEBUG")}
    assert headers.flag_sets("class ModelNew(:") == set()


def test_a_set_is_precompiled_once_two_candidates_of_a_batch_ask_for_it(tmp_path, monkeypatch):
    monkeypatch.delenv(headers.DISABLE_ENV, raising=False)
    o3 = 'load_inline(name="x", cpp_sources="", extra_cflags=["-O3"])'
    bare = 'load_inline(name="x", cpp_sources="")'
    shadowing = 'load_inline(name="x", cpp_sources="", extra_cflags=["-O3"], extra_include_paths=["."])'
    cuda = 'load_inline(name="x", cpp_sources="", cuda_sources="", extra_cflags=["-O3"])'
    assert headers.missing(tmp_path, "cpu", [o3, o3, bare, shadowing]) == [(("-O3",), False)]
    assert headers.missing(tmp_path, "cpu", [o3, cuda]) == []  # a CUDA extension's main.cpp sees other headers
    assert headers.missing(tmp_path, "cpu", [cuda, cuda]) == [(("-O3",), True)]
    monkeypatch.setenv(headers.DISABLE_ENV, "0")
    assert headers.missing(tmp_path, "cpu", [o3, o3]) == []


def test_no_folder_is_named_until_a_header_is_there(tmp_path):
    source = 'load_inline(name="x", cpp_sources="", extra_cflags=["-O3"])'
    assert headers.headers_for(tmp_path, "cpu", source) is None
    folder = headers.headers_root(tmp_path, "cpu", False) / "torch" / "extension.h.gch"
    folder.mkdir(parents=True)
    (folder / "0123").write_bytes(b"")
    assert headers.headers_for(tmp_path, "cpu", source) is None  # not without torch's header beside it
    headers.link_header(headers.headers_root(tmp_path, "cpu", False))
    assert headers.headers_for(tmp_path, "cpu", source) == headers.headers_root(tmp_path, "cpu", False)
    assert headers.headers_for(tmp_path, "cpu", source.replace(")", ", extra_include_paths=['.'])")) is None


# twice, as load_inline writes it and most candidates add their own
BINDING = ("#include <torch/extension.h>\n\n#include <torch/extension.h>\n"
           "torch::Tensor add_one(torch::Tensor x) { return x + 1; }\n")


@pytest.fixture(scope="module")
def o3_header():
    """The `-O3` header of this toolchain, in the shared test build cache (made once, kept across sessions)."""
    made = headers.build(default_cache_dir(), "cpu", ("-O3",), False)
    if made is None:
        pytest.skip("this torch's ninja writer is not the one evaluator.referee.headers reads")
    return made


@pytest.mark.slow
def test_the_object_file_is_the_same_with_the_precompiled_header(tmp_path, o3_header):
    """The binding compiled as torch compiles it, and again finding the header in the harness's folder:
    GCC says it used the precompiled header (`-H` prints it with a `!`), and the objects are equal byte
    for byte. The plain object (torch's header read as text, 20 s) is kept in the shared test cache."""
    command = headers._command(("-O3",), False)
    cflags = command[command.index("-x") + 3:]  # the flags after `-x c++-header <header>`
    compiler = command[:command.index("-x")]
    (tmp_path / "main.cpp").write_text(BINDING)
    kept = default_cache_dir() / "test-objects" / (json_digest([*command, BINDING])[:16] + ".o")
    objects = {}
    for name, extra in (("plain", {}), ("precompiled", {"CPATH": str(o3_header.parents[2])})):
        if name == "plain" and kept.is_file():
            objects[name] = kept.read_bytes()
            continue
        done = subprocess.run([*compiler, "-H", "-DTORCH_EXTENSION_NAME=kh_test", *cflags, "-c", "main.cpp",
                               "-o", f"{name}.o"], cwd=tmp_path, env={**os.environ, **extra}, capture_output=True,
                              text=True)
        assert done.returncode == 0, done.stderr[-2000:]
        objects[name] = (tmp_path / f"{name}.o").read_bytes()
        used = f"! {o3_header}" in done.stderr
        assert used == (name == "precompiled"), (shlex.join(done.args), done.stderr[:500])
    assert objects["plain"] == objects["precompiled"]
    kept.parent.mkdir(parents=True, exist_ok=True)
    kept.write_bytes(objects["plain"])


# A stand-in for torch's header, precompiled with the flags torch's would be: a build that takes it from the
# harness's folder sees KH_PRECOMPILED, one that reads torch/extension.h as text stops at the #error.
MARKER_HEADER = "#include <pybind11/pybind11.h>\n#define KH_PRECOMPILED 1\n"
MARKED_BINDING = """
#ifndef KH_PRECOMPILED
#error "torch/extension.h was read as text: the precompiled header was not used"
#endif
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) { m.def("one", [] { return 1; }); }
"""
CANDIDATE = '''# {token}
import os
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

{prelude}
ext = load_inline(name="kh_pch_{token}", cpp_sources={binding!r}, extra_cflags=["-O3"]{more})


class ModelNew(nn.Module):
    pass
'''
# A folder of the candidate's own, searched before any other: its torch/extension.h (empty) is what GCC reads.
SHADOW = '''os.makedirs("inc/torch", exist_ok=True)
open("inc/torch/extension.h", "w").close()'''


@pytest.mark.slow
def test_a_contained_build_takes_the_precompiled_header_from_the_harness_folder(tmp_path):
    command = headers._command(("-O3",), False)
    if command is None:
        pytest.skip("this torch's ninja writer is not the one evaluator.referee.headers reads")
    cache = tmp_path / "cache"
    folder = headers.headers_root(cache, "cpu", False) / "torch" / "extension.h.gch"
    folder.mkdir(parents=True)
    headers.link_header(headers.headers_root(cache, "cpu", False))
    (tmp_path / "marker.h").write_text(MARKER_HEADER)
    header_at = command.index("-x") + 2
    subprocess.run([*command[:header_at], str(tmp_path / "marker.h"), *command[header_at + 1:], "-o",
                    str(folder / "marker")], check=True, capture_output=True)
    path = tmp_path / "candidate.py"
    path.write_text(CANDIDATE.format(token=secrets.token_hex(4), binding=MARKED_BINDING, prelude="", more=""))
    options = EvalOptions(device="cpu", size="small", compile_only=True, log_root=tmp_path / "logs",
                          cache_dir=cache, run_rejected=True)
    verdict = Evaluator(options).evaluate(CandidateFile(name="pch", path=path))
    assert verdict.status.value == "compiled", verdict.error
    assert verdict.containment and not verdict.containment.missing
    # a candidate with include folders of its own is given none: its folders come first, and here its own
    # torch/extension.h is read
    path.write_text(CANDIDATE.format(token=secrets.token_hex(4), binding=MARKED_BINDING, prelude=SHADOW,
                                     more=', extra_include_paths=[os.path.abspath("inc")]'))
    verdict = Evaluator(options).evaluate(CandidateFile(name="pch", path=path))
    assert verdict.status.value == "compile_error" and "was read as text" in (verdict.error or ""), verdict.error


def test_a_folder_keeps_the_newest_headers_only(tmp_path):
    folder, work = tmp_path / "torch" / "extension.h.gch", tmp_path / ".building"
    folder.mkdir(parents=True)
    work.mkdir()
    for age, name in enumerate(["d", "c", "b", "a", "e"]):
        (folder / name).write_bytes(b"")
        os.utime(folder / name, (1000 - age, 1000 - age))  # "d" the newest, "e" the oldest
    headers._make_room(folder, work)
    assert sorted(p.name for p in folder.iterdir()) == ["b", "c", "d"] and not list(work.iterdir())
