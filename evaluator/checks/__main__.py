"""`python -m evaluator.checks [--problem P] FILE...`: the static flags of candidate files."""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Iterator

from evaluator.checks import static_flags
from evaluator.wire.problem import DEFAULT_PROBLEM, load_problem


def _iter_sources(paths: Iterable[str]) -> Iterator[tuple[str, str]]:
    for p in paths:
        with open(p, encoding="utf-8") as fh:  # the harness reads files, the candidate does not
            yield p, fh.read()


def main() -> None:
    parser = argparse.ArgumentParser(description="Static checks on candidate files.")
    parser.add_argument("--problem", default=DEFAULT_PROBLEM, help="Problem name, folder or bare .py file.")
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    problem_rules = load_problem(args.problem).rules
    for path, text in _iter_sources(args.files):
        print(path)
        for flag in static_flags(text, rules=problem_rules):
            print(f"  {flag.name} ({flag.policy.value}): {flag.reason}")


if __name__ == "__main__":  # pragma: no cover
    main()
