"""A run's folder on disk: `<runs_dir>/<run-id>/<sample>/`, what was asked, what came back and the
candidate taken out of it, for people to read and for `--model replay:DIR` to read back."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from harness.core.records import Generation, Message, ParseResult
from harness.generation.prompts import format_messages
from harness.generation.salvage import Salvaged


def write_sample_folder(folder: Path, messages: Sequence[Message], generation: Generation,
                        parse: ParseResult | None, salvaged: Salvaged | None = None) -> Path | None:
    """prompt.md, reply.md (+ reasoning.md), generation.json and, when parsed, candidate.py; for a
    salvaged reply also salvage/<n>.md and salvage/<n>.json (each extra request's reply and generation:
    a replay folder reads them back) and salvaged.md (the reply the candidate was taken from).
    Returns the candidate path (None when there is no source)."""
    folder.mkdir(parents=True, exist_ok=True)
    if salvaged is not None:
        (folder / "salvage").mkdir(exist_ok=True)
        for number, step in enumerate(salvaged.generations, 1):
            (folder / "salvage" / f"{number}.json").write_text(step.model_dump_json(indent=2))
            if step.completion.ok or step.completion.text:
                (folder / "salvage" / f"{number}.md").write_text(step.completion.text)
        (folder / "salvaged.md").write_text(salvaged.text)
    elif (folder / "salvaged.md").exists():
        (folder / "salvaged.md").unlink()
    (folder / "prompt.md").write_text(format_messages(messages))
    (folder / "generation.json").write_text(generation.model_dump_json(indent=2))
    completion = generation.completion
    if completion.ok or completion.text:
        (folder / "reply.md").write_text(completion.text)
    if completion.reasoning:
        (folder / "reasoning.md").write_text(completion.reasoning)
    path = folder / "candidate.py"
    if parse is not None and parse.source is not None:
        if not path.is_file() or path.read_text() != parse.source:
            path.write_text(parse.source)
        return path
    if path.exists():
        path.unlink()
    return None
