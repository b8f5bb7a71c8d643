"""How the executor says what went wrong: the exception being handled, the candidate's build errors first."""

from __future__ import annotations

import sys
import traceback

from evaluator.executor import triton_watch

ERROR_CHARS = 6000

CANDIDATE_SOURCE = [""]  # the candidate's text (set as it is imported), for Triton's compile errors at its own lines


def describe_exception(prefix: str) -> str:
    """`prefix: ` and the exception being handled: where Triton could not compile a kernel, that first, at the
    candidate's own line (triton_watch.compile_error_at), then the traceback's last ERROR_CHARS."""
    source = CANDIDATE_SOURCE[0]
    where = triton_watch.compile_error_at(sys.exc_info()[1], source) if source else None
    trace = traceback.format_exc()[-ERROR_CHARS:]
    return f"{prefix}: {where}\n\n{trace}" if where else f"{prefix}: {trace}"


def describe_import_failure(err: BaseException) -> str:
    """Compiler errors first (they sit deep inside torch's build exception), then the traceback."""
    text = str(err)
    errors = [line.strip() for line in text.splitlines() if " error" in line or line.startswith("error")]
    if "Error building extension" in text and errors:
        return "build failed: " + "\n".join(errors[:5]) + "\n\n" + describe_exception("traceback")
    return describe_exception("importing the candidate failed")
