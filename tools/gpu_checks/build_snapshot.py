"""What each extension build folder under a build cache holds, to see why a build was done again (golden
kernels prebuilt by `harness eval --compile-only` were built once more by the judging executor).

    python3 tools/gpu_checks/build_snapshot.py save CACHE OUT/before      build.ninja, .ninja_log and every file's mtime
    python3 tools/gpu_checks/build_snapshot.py diff OUT/before OUT/after  what changed between two snapshots, and ninja's own
                                                             reasons (explain.log, written by a `ninja -d explain`
                                                             wrapper on PATH) where a folder has them
"""

import difflib
import json
import shutil
import sys
from pathlib import Path


def save(cache: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    index = {}
    for ninja in sorted(cache.glob("extensions/*/*/*/build.ninja")):
        folder = ninja.parent
        key = "-".join(folder.parts[-3:])
        shutil.copy(ninja, out / f"{key}.ninja")
        if (folder / ".ninja_log").exists():
            shutil.copy(folder / ".ninja_log", out / f"{key}.ninja_log")
        if (folder / "explain.log").exists():
            shutil.copy(folder / "explain.log", out / f"{key}.explain")
        index[key] = {p.name: p.stat().st_mtime_ns for p in sorted(folder.iterdir()) if p.is_file()}
    # the precompiled headers executors are given in CPATH (evaluator.referee.headers), and torch's link beside them
    index["headers"] = {str(p.relative_to(cache)): p.stat().st_mtime_ns
                        for p in sorted(cache.glob("headers/*/*/torch/*")) + sorted(cache.glob("headers/*/*/torch/*/*"))}
    (out / "index.json").write_text(json.dumps(index, indent=1))
    print(f"{len(index) - 1} build folders saved to {out}")


def diff(before: Path, after: Path) -> None:
    old, new = (json.loads((d / "index.json").read_text()) for d in (before, after))
    for key in sorted(set(old) | set(new)):
        if key == "headers":
            print("== precompiled headers:", json.dumps({k: "new" if k not in old.get(key, {}) else "rewritten"
                                                         for k, v in new[key].items() if old.get(key, {}).get(k) != v}))
            continue
        if key not in old:
            print(f"== {key}: a new build folder")
            continue
        if key not in new:
            print(f"== {key}: gone")
            continue
        touched = sorted(n for n in new[key] if old[key].get(n) != new[key][n])
        print(f"== {key}: {'files rewritten: ' + ', '.join(touched) if touched else 'nothing rewritten'}")
        a, b = (d / f"{key}.ninja" for d in (before, after))
        lines = list(difflib.unified_diff(a.read_text().splitlines(), b.read_text().splitlines(), "before", "after",
                                          lineterm="", n=0))
        print("\n".join(lines[:40]) if lines else "   build.ninja unchanged")
        explained = [(d / f"{key}.explain") for d in (before, after)]
        said = [e.read_text().splitlines() if e.exists() else [] for e in explained]
        if len(said[1]) > len(said[0]):  # what ninja said since the first snapshot
            print("   ninja -d explain:")
            print("\n".join("   " + line for line in said[1][len(said[0]):][:30]))


if __name__ == "__main__":
    command, first, second = sys.argv[1:4]
    (save if command == "save" else diff)(Path(first), Path(second))
