"""A candidate's folders removed whatever it left there (evaluator.wire.folders): nested past Python's recursion limit
(shutil.rmtree raised RecursionError out of the referee's clean-up: fixture hacks/cpu/deep_folders.py), and a link
out of the folder removed without touching what it points to."""

import os
import shutil
import sys

from evaluator.wire.folders import remove_tree


def test_a_folder_nested_past_the_recursion_limit_is_removed(tmp_path, monkeypatch):
    top = tmp_path / "worker"
    top.mkdir()
    monkeypatch.chdir(top)
    for _ in range(sys.getrecursionlimit() + 200):
        os.mkdir("d")
        os.chdir("d")
    (top / "d" / "f").write_bytes(b"x")
    monkeypatch.chdir(tmp_path)
    remove_tree(top)
    assert not top.exists()


def test_a_link_out_of_the_folder_is_removed_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept").write_bytes(b"x")
    top = tmp_path / "worker"
    top.mkdir()
    (top / "link").symlink_to(outside, target_is_directory=True)
    remove_tree(top)
    assert not top.exists() and (outside / "kept").exists()


def test_without_rm_it_falls_back_and_never_raises(tmp_path, monkeypatch):
    top = tmp_path / "worker"
    (top / "a").mkdir(parents=True)
    monkeypatch.setenv("PATH", str(tmp_path / "nothing"))
    remove_tree(top)
    assert not top.exists()
    remove_tree(tmp_path / "missing")  # nothing there: no error
    assert shutil.which("rm") is None
