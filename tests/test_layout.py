"""The evaluator's layout by process (issue 24): which folder may import which, read from every import in
every module (inside functions and behind TYPE_CHECKING too). The wire is at the bottom; the executor, the
only code a candidate can reach, imports nothing but the wire; the referee never imports the executor's
code or the parent's; nothing in the evaluator imports the harness."""

import ast
from pathlib import Path

EVALUATOR = Path(__file__).resolve().parent.parent / "evaluator"
# folder -> the evaluator folders its modules may import (besides its own)
ALLOWED = {
    "wire": set(),
    "executor": {"wire"},
    "checks": {"wire"},
    "referee": {"wire"},
    "parent": {"wire", "checks", "referee"},
}


def imported_modules(path: Path) -> set[str]:
    """Every module `path` imports, anywhere in it (`from evaluator.x import y` counts as evaluator.x.y too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def folder_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "evaluator" and len(parts) > 1 and parts[1] in ALLOWED else None


def test_every_folder_imports_only_what_sits_below_it():
    crossings = []
    for folder, allowed in ALLOWED.items():
        for path in sorted((EVALUATOR / folder).glob("*.py")):
            for module in imported_modules(path):
                if module == "harness" or module.startswith("harness."):
                    crossings.append(f"{path.relative_to(EVALUATOR)} imports {module}")
                target = folder_of(module)
                if target is not None and target != folder and target not in allowed:
                    crossings.append(f"{path.relative_to(EVALUATOR)} imports {module}")
    assert not crossings, "\n".join(crossings)


def test_every_module_lives_in_a_process_folder():
    loose = [p.name for p in EVALUATOR.glob("*.py") if p.name != "__init__.py"]
    folders = {p.name for p in EVALUATOR.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert not loose and folders == set(ALLOWED), (loose, folders)


# The harness's layout by activity (issue 34): its folders, lowest first; a folder's modules import only the
# folders before it (and their own); the CLI is on top; of the evaluator the harness imports the parent's API
# and the wire (evaluator.parent.referee_side names the referee's few helpers it calls).
HARNESS = EVALUATOR.parent / "harness"
HARNESS_FLOORS = ["core", "problems", "generation", "feedback", "results", "runs", "bench", "service", "cli"]
HARNESS_TOP = {"__init__.py", "__main__.py"}  # the package's lazy API and `python -m harness`
HARNESS_READS_OF_THE_EVALUATOR = {"evaluator.parent", "evaluator.wire"}


def harness_folder_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "harness" and len(parts) > 1 and parts[1] in HARNESS_FLOORS else None


def test_the_harness_folders_import_one_way_and_only_the_parent_and_the_wire_of_the_evaluator():
    crossings = []
    for floor, folder in enumerate(HARNESS_FLOORS):
        below = set(HARNESS_FLOORS[:floor])
        for path in sorted((HARNESS / folder).glob("*.py")):
            for module in imported_modules(path):
                target = harness_folder_of(module)
                if target is not None and target != folder and target not in below:
                    crossings.append(f"{path.relative_to(HARNESS)} imports {module} (above it)")
                if module.startswith("evaluator.") and not any(
                        module == allowed or module.startswith(allowed + ".")
                        for allowed in HARNESS_READS_OF_THE_EVALUATOR):
                    crossings.append(f"{path.relative_to(HARNESS)} imports {module}")
    assert not crossings, "\n".join(crossings)


def test_every_harness_module_lives_in_a_folder_and_the_readme_map_names_every_folder():
    loose = {p.name for p in HARNESS.glob("*.py")} - HARNESS_TOP
    folders = {p.name for p in HARNESS.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert not loose and folders == set(HARNESS_FLOORS), (loose, folders)
    layout = (EVALUATOR.parent / "docs" / "layout.md").read_text()
    missing = [f for f in HARNESS_FLOORS if f"`{f}/`" not in layout]
    assert not missing, f"docs/layout.md does not name {missing}"


def test_every_parse_of_the_harness_holds_the_parse_lock():
    """CPython 3.11's AST constructor races across threads (evaluator/wire/syntax.py): no module of the harness or the
    evaluator calls `ast.parse` but `syntax.parse`, which holds the lock."""
    root = EVALUATOR.parent
    raw = [f"{path.relative_to(root)}:{node.lineno}" for folder in ("evaluator", "harness")
           for path in sorted((root / folder).rglob("*.py")) if path.name != "syntax.py"
           for node in ast.walk(ast.parse(path.read_text()))
           if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "parse"
           and isinstance(node.func.value, ast.Name) and node.func.value.id == "ast"]
    assert not raw, f"ast.parse outside evaluator/wire/syntax.py: {raw}"
