"""The result store: one SQLite file (stdlib sqlite3) holding runs, generations, candidates
and verdicts.

Each row keeps its full record as JSON (the pydantic model, read back with `extra="forbid"`)
plus indexed key columns to filter on. Default path: `.harness/results.sqlite` under the
working folder (`--store PATH` or `HARNESS_STORE` override it).

Tables:

- `schema_version(version)`: one row. A store written by a newer harness is refused; an
  older one is migrated in place when opened (see `_MIGRATIONS`).
- `runs(id, mode, ..., record)`: a `Run` (resolved config, versions, GPU). Modes: `generate`
  (`harness run` asking a model), `golden` (committed golden kernels, from `harness run`
  without a model or `harness eval`/`bench` of files under candidates/golden/), `eval`
  (`harness eval` of any other files: one run named `eval`).
- `generations(key, run_id, sample_index, ok, ..., salvage_of, record)`: a `Generation`, keyed by
  `generation_key()`: a hash of problem, rendered prompt, model, params and sample index.
  A rerun with the same settings finds its replies here and asks the model for nothing. The extra
  requests salvaging a reply cut off by the token limit (harness.generation.salvage) are rows too, `salvage_of`
  the key of the generation they salvage (NULL for a sample's own request), keyed by their own
  conversation, so a rerun asks for none of them twice either.
- `candidates(id, run_id, sample, source_sha256, verdict_key, ..., record)`: a `Candidate`
  (`<run-id>/<sample>`), with the key of the verdict that judged it.
- `verdicts(key, source_sha256, problem, size, fingerprint, device_name, status,
  runtime_ms, run_id, model, variant, ..., record)`: a `Verdict`, keyed by
  `evaluator.wire.identity.verdict_key()`: a hash of source hash, problem, size, device name and
  the fingerprint of what judged it (evaluator sources, problem files, torch/CUDA). The same
  source judged again under the same key is not re-evaluated; a change to any check gives new
  keys, so nothing judged before it is reused. `run_id`, `model` and `variant` say which run
  first produced it, and `candidates.verdict_key` links every run that reuses it.

Reading for a leaderboard: `Store.list_verdicts(run=..., model=..., problem=..., size=...,
variant=...)` returns `VerdictRow`s, one per candidate of a run that has a verdict.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from evaluator.wire.records import json_digest
from evaluator.wire.records import Flag, Status, Verdict, merge_flags
from harness.core.records import Candidate, Generation, GenerationParams, Message, Run, utc_now

STORE_SCHEMA_VERSION = 6
NO_MODEL = "-"  # the model and variant columns of runs no model answered (`harness eval`)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS schema_version (
    version INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS runs (
    id          TEXT PRIMARY KEY,
    created     TEXT NOT NULL,
    updated     TEXT NOT NULL,
    mode        TEXT NOT NULL,
    problem     TEXT NOT NULL,
    model       TEXT,
    variant     TEXT,
    device_name TEXT,
    record      TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS generations (
    key           TEXT PRIMARY KEY,
    run_id        TEXT NOT NULL,
    problem       TEXT NOT NULL,
    model         TEXT NOT NULL,
    variant       TEXT NOT NULL,
    sample_index  INTEGER NOT NULL,
    ok            INTEGER NOT NULL,
    finish_reason TEXT,
    created       TEXT NOT NULL,
    record        TEXT NOT NULL,
    salvage_of    TEXT
);
CREATE INDEX IF NOT EXISTS generations_run ON generations (run_id, sample_index);
CREATE INDEX IF NOT EXISTS generations_salvage ON generations (salvage_of);
CREATE TABLE IF NOT EXISTS candidates (
    id             TEXT PRIMARY KEY,
    run_id         TEXT NOT NULL,
    sample         TEXT NOT NULL,
    problem        TEXT NOT NULL,
    generation_key TEXT,
    source_sha256  TEXT,
    parent         TEXT,
    parse_ok       INTEGER NOT NULL,
    parse_reason   TEXT,
    verdict_key    TEXT,
    record         TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS candidates_run ON candidates (run_id);
CREATE INDEX IF NOT EXISTS candidates_source ON candidates (source_sha256);
CREATE TABLE IF NOT EXISTS verdicts (
    key               TEXT PRIMARY KEY,
    source_sha256     TEXT NOT NULL,
    problem           TEXT NOT NULL,
    size              TEXT NOT NULL,
    evaluator_version TEXT NOT NULL,
    fingerprint       TEXT,
    device_name       TEXT NOT NULL,
    status            TEXT NOT NULL,
    runtime_ms        REAL,
    run_id            TEXT,
    model             TEXT,
    variant           TEXT,
    candidate_id      TEXT,
    created           TEXT NOT NULL,
    record            TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS verdicts_lookup ON verdicts (problem, size, device_name, status);
CREATE TABLE IF NOT EXISTS verdict_history (
    key      TEXT NOT NULL,
    created  TEXT NOT NULL,
    replaced TEXT NOT NULL,
    record   TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS verdict_history_key ON verdict_history (key);
CREATE TABLE IF NOT EXISTS baselines (key TEXT PRIMARY KEY, updated TEXT NOT NULL, record TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, key TEXT NOT NULL, state TEXT NOT NULL, client TEXT, created TEXT NOT NULL, updated TEXT NOT NULL, request TEXT NOT NULL, verdict TEXT, error TEXT, judged INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS jobs_key ON jobs (key);
CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state, created);
CREATE INDEX IF NOT EXISTS verdicts_source ON verdicts (source_sha256);
CREATE INDEX IF NOT EXISTS verdicts_run ON verdicts (run_id);
"""


# Schema changes, each (version it brings the store to, statements). Run in order on an older store.
_MIGRATIONS: tuple[tuple[int, tuple[str, ...]], ...] = (
    (2, (
        # verdicts are keyed by what judged them; the old rows have no fingerprint, so their keys
        # never match a new one and the leaderboard shows them as `stale`
        "ALTER TABLE verdicts ADD COLUMN fingerprint TEXT",
        # `harness eval` runs were written as mode `golden` and told apart by their id
        "UPDATE runs SET mode = 'eval', record = json_set(record, '$.mode', 'eval') WHERE id = 'eval'",
    )),
    (3, (
        # extra requests salvaging a reply cut off by the token limit are generations of their own, each
        # naming the generation it salvages; every older generation is a sample's own request (NULL)
        "ALTER TABLE generations ADD COLUMN salvage_of TEXT",
        "CREATE INDEX IF NOT EXISTS generations_salvage ON generations (salvage_of)",
    )),
    (4, (
        # a verdict judged again (`harness run --retime`, `harness eval` of a stored source) keeps the one it
        # replaced
        "CREATE TABLE IF NOT EXISTS verdict_history (key TEXT NOT NULL, created TEXT NOT NULL,"
        " replaced TEXT NOT NULL, record TEXT NOT NULL)",
        "CREATE INDEX IF NOT EXISTS verdict_history_key ON verdict_history (key)",
    )),
    (5, (  # baselines timed once per problem, size, device model and judge (harness.results.baseline_cache)
        "CREATE TABLE IF NOT EXISTS baselines (key TEXT PRIMARY KEY, updated TEXT NOT NULL, record TEXT NOT NULL)",
    )),
    (6, (  # the jobs of `harness serve` (harness.service.server)
        "CREATE TABLE IF NOT EXISTS jobs (id TEXT PRIMARY KEY, key TEXT NOT NULL, state TEXT NOT NULL, client TEXT, created TEXT NOT NULL, updated TEXT NOT NULL, request TEXT NOT NULL, verdict TEXT, error TEXT, judged INTEGER NOT NULL DEFAULT 0)",
        "CREATE INDEX IF NOT EXISTS jobs_key ON jobs (key)", "CREATE INDEX IF NOT EXISTS jobs_state ON jobs (state, created)",
    )),
)


class StoreError(RuntimeError):
    """The store cannot be used (newer schema, unreadable file)."""


# -- keys (pure) --------------------------------------------------------------------------------

def generation_key(problem: str, messages: Sequence[Message], params: GenerationParams, sample_index: int) -> str:
    """SHA-256 of (problem, conversation, model, params, sample index, and for later refinement turns
    the sample path, for salvage requests their `strategy/number`): the resume key of a reply. A first
    turn's key is what it always was."""
    parts = {
        "problem": problem,
        "messages": [m.model_dump() for m in messages],
        "model": params.model,
        "params": params.model_dump(mode="json", exclude={"sample_index", "model", "lineage", "salvage"}),
        "sample": sample_index,
    }
    if params.lineage is not None:
        parts["lineage"] = params.lineage
    if params.salvage is not None:
        parts["salvage"] = params.salvage
    return json_digest(parts)


def default_listing(run: Run) -> tuple[str | None, str | None]:
    """The (model, variant) a run's candidates are listed under, by its mode."""
    if run.mode == "generate":
        return run.config.get("model"), run.config.get("variant")
    return ("golden", None) if run.mode == "golden" else (NO_MODEL, NO_MODEL)


def source_sha256(source: str) -> str:
    """SHA-256 of a source's UTF-8 bytes (what the evaluator hashes, too)."""
    return hashlib.sha256(source.encode("utf-8")).hexdigest()


# -- rows for readers ---------------------------------------------------------------------------

class VerdictRow(BaseModel):
    """One judged candidate of one run, as `Store.list_verdicts` returns it."""

    model_config = ConfigDict(extra="forbid")
    run_id: str = Field(description="The run the candidate belongs to.")
    candidate_id: str = Field(description="`<run-id>/<sample>`.")
    sample: str = Field(description="Sample name within the run (index, or golden file stem).")
    model: str | None = Field(description="Model of the run (`golden` for committed candidates).")
    variant: str | None = Field(description="Prompt variant of the run (None for golden).")
    problem: str = Field(description="Problem name.")
    size: str = Field(description="Size preset.")
    device_name: str = Field(description="GPU name (or the CPU's) the verdict was produced on.")
    status: Status = Field(description="The verdict's status.")
    runtime_ms: float | None = Field(description="Median candidate time, when correct.")
    source_sha256: str = Field(description="SHA-256 of the candidate source.")
    verdict_key: str = Field(description="The verdict's key in the store.")
    created: str = Field(description="When the verdict was produced (UTC).")
    verdict: Verdict = Field(description="The full verdict.")


# -- the store ----------------------------------------------------------------------------------

class Store:
    """A result store on one SQLite file. Use as a context manager, or call `close()`."""

    def __init__(self, path: Path | str, *, read_only: bool = False):
        self.path, self.read_only = Path(path), read_only
        if read_only:
            self.db = self._connect_read_only()
            return
        if str(path) != ":memory:":
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise StoreError(f"cannot make the result store's folder {self.path.parent}: "
                                 f"{err.strerror or err}") from err
        try:
            self.db = sqlite3.connect(str(path), timeout=30)
            self.db.execute("PRAGMA busy_timeout = 30000")
            self._check_schema()
        except sqlite3.DatabaseError as err:
            raise StoreError(f"cannot open the result store {path}: {err}") from err
        try:
            self.db.execute("PRAGMA journal_mode = WAL")
        except sqlite3.DatabaseError:  # some file systems cannot; the default journal works too
            pass

    def _connect_read_only(self) -> sqlite3.Connection:
        """For commands that only read: a store in a folder this user cannot write is still read (SQLite
        cannot make its WAL index there, so the file is then read as it is, `immutable`)."""
        uri = self.path.resolve().as_uri()
        for flags in ("mode=ro", "mode=ro&immutable=1"):
            try:
                db = sqlite3.connect(f"{uri}?{flags}", uri=True, timeout=30)
                row = db.execute("SELECT MAX(version) FROM schema_version").fetchone()
                break
            except sqlite3.DatabaseError as err:
                error = err
        else:
            raise StoreError(f"cannot open the result store {self.path}: {error}")
        version = row[0] if row else None
        if version != STORE_SCHEMA_VERSION:
            db.close()
            raise StoreError(f"the result store {self.path} has schema version {version}, this harness reads "
                             f"{STORE_SCHEMA_VERSION}: open it once with a command that writes it (from a folder "
                             "you can write) to migrate it, or upgrade kernelharness")
        return db

    def _check_schema(self) -> None:
        has_table = self.db.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'schema_version'").fetchone()
        version = None
        if has_table:
            row = self.db.execute("SELECT MAX(version) FROM schema_version").fetchone()
            version = row[0] if row and row[0] is not None else None
            if version is not None and version > STORE_SCHEMA_VERSION:
                raise StoreError(
                    f"the result store {self.path} has schema version {version}, newer than this harness "
                    f"reads ({STORE_SCHEMA_VERSION}); upgrade kernelharness or use another --store")
        if version is None:  # a new store, made in one transaction: never half made, and one sync to disk (a
            # transaction for each of its 24 statements took 0.34 s)
            self.db.executescript(f"BEGIN;\n{_SCHEMA}\nINSERT INTO schema_version (version) VALUES "
                                  f"({int(STORE_SCHEMA_VERSION)});\nCOMMIT;")
            return
        with self.db:  # one transaction: a migration is never left half done
            for target, statements in _MIGRATIONS:
                if version < target:
                    for statement in statements:
                        self.db.execute(statement)
                    self.db.execute("UPDATE schema_version SET version = ?", (target,))
                    version = target

    @property
    def schema_version(self) -> int:
        return self.db.execute("SELECT MAX(version) FROM schema_version").fetchone()[0]

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self.db:
            yield self.db

    # runs ---------------------------------------------------------------------------------------

    def put_run(self, run: Run, *, listed_as: tuple[str | None, str | None] | None = None) -> Run:
        """Insert or update a run. An existing run keeps its `created` time. `listed_as` is the
        (model, variant) the leaderboard lists its candidates under; by default the run's own
        for `generate`, (`golden`, None) for `golden` and (`-`, `-`) for `eval`."""
        existing = self.get_run(run.id)
        if existing is not None:
            run = run.model_copy(update={"created": existing.created})
        model, variant = listed_as or default_listing(run)
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO runs (id, created, updated, mode, problem, model, variant, device_name, record)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run.id, run.created, run.updated, run.mode, run.config.get("problem", ""), model, variant,
                 run.device_name, run.model_dump_json()))
        return run

    def get_run(self, run_id: str) -> Run | None:
        row = self.db.execute("SELECT record FROM runs WHERE id = ?", (run_id,)).fetchone()
        return Run.model_validate_json(row[0]) if row else None

    def list_runs(self, *, problem: str | None = None, model: str | None = None) -> list[Run]:
        """Runs, newest first, optionally filtered."""
        sql, args = "SELECT record FROM runs WHERE 1 = 1", []
        if problem is not None:
            sql, args = sql + " AND problem = ?", args + [problem]
        if model is not None:
            sql, args = sql + " AND model = ?", args + [model]
        return [Run.model_validate_json(r[0]) for r in self.db.execute(sql + " ORDER BY updated DESC", args)]

    # generations --------------------------------------------------------------------------------

    def put_generation(self, generation: Generation) -> None:
        """Insert or replace a generation by its key."""
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO generations (key, run_id, problem, model, variant, sample_index, ok,"
                " finish_reason, created, salvage_of, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (generation.key, generation.run_id, generation.problem, generation.params.model, generation.variant,
                 generation.sample_index, int(generation.completion.ok), generation.completion.finish_reason,
                 generation.created, generation.salvage_of, generation.model_dump_json()))

    def get_generation(self, key: str) -> Generation | None:
        row = self.db.execute("SELECT record FROM generations WHERE key = ?", (key,)).fetchone()
        return Generation.model_validate_json(row[0]) if row else None

    def list_generations(self, run_id: str) -> list[Generation]:
        """Generations first asked for by `run_id` (salvage requests included), by sample index."""
        rows = self.db.execute("SELECT record FROM generations WHERE run_id = ? ORDER BY sample_index", (run_id,))
        return [Generation.model_validate_json(r[0]) for r in rows]

    def list_salvage(self, key: str) -> list[Generation]:
        """The extra requests that salvaged the reply of generation `key`, oldest first."""
        rows = self.db.execute("SELECT record FROM generations WHERE salvage_of = ? ORDER BY created, rowid", (key,))
        return [Generation.model_validate_json(r[0]) for r in rows]

    # candidates ---------------------------------------------------------------------------------

    def put_candidate(self, candidate: Candidate, verdict_key: str | None = None) -> None:
        """Insert or replace a candidate; `verdict_key` links the verdict that judged it."""
        if verdict_key is None:
            row = self.db.execute("SELECT verdict_key FROM candidates WHERE id = ?", (candidate.id,)).fetchone()
            verdict_key = row[0] if row else None
        with self._tx() as db:
            db.execute(
                "INSERT OR REPLACE INTO candidates (id, run_id, sample, problem, generation_key, source_sha256, parent,"
                " parse_ok, parse_reason, verdict_key, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (candidate.id, candidate.run_id, candidate.sample, candidate.problem, candidate.generation_key,
                 candidate.source_sha256, candidate.parent, int(candidate.parse.ok),
                 candidate.parse.reason.value if candidate.parse.reason else None, verdict_key,
                 candidate.model_dump_json()))

    def link_verdict(self, candidate_id: str, verdict_key: str) -> None:
        """Record that `verdict_key` judges candidate `candidate_id`."""
        with self._tx() as db:
            db.execute("UPDATE candidates SET verdict_key = ? WHERE id = ?", (verdict_key, candidate_id))

    def get_candidate(self, candidate_id: str) -> Candidate | None:
        row = self.db.execute("SELECT record FROM candidates WHERE id = ?", (candidate_id,)).fetchone()
        return Candidate.model_validate_json(row[0]) if row else None

    def list_candidates(self, run_id: str) -> list[Candidate]:
        rows = self.db.execute("SELECT record FROM candidates WHERE run_id = ? ORDER BY id", (run_id,))
        return [Candidate.model_validate_json(r[0]) for r in rows]

    # verdicts -----------------------------------------------------------------------------------

    def put_verdict(self, key: str, verdict: Verdict, *, device_name: str, run_id: str | None = None,
                    model: str | None = None, variant: str | None = None, candidate_id: str | None = None) -> None:
        """Insert or replace the verdict stored under `key` (see `evaluator.wire.identity.verdict_key`),
        and link it to `candidate_id` when given. `device_name` is the name the key was made with. A verdict
        it replaces is kept in `verdict_history` (`history`)."""
        with self._tx() as db:
            db.execute("INSERT INTO verdict_history (key, created, replaced, record)"
                       " SELECT key, created, ?, record FROM verdicts WHERE key = ?", (utc_now(), key))
            db.execute(
                "INSERT OR REPLACE INTO verdicts (key, source_sha256, problem, size, evaluator_version, fingerprint,"
                " device_name, status, runtime_ms, run_id, model, variant, candidate_id, created, record)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (key, verdict.source_sha256, verdict.problem, verdict.size, verdict.evaluator_version,
                 verdict.judge.fingerprint if verdict.judge else None, device_name, verdict.status.value,
                 verdict.runtime_ms, run_id, model, variant, candidate_id, utc_now(), verdict.model_dump_json()))
            if candidate_id is not None:
                db.execute("UPDATE candidates SET verdict_key = ? WHERE id = ?", (key, candidate_id))

    def amend(self, key: str, flags: Sequence[Flag], next_round_ms: dict[str, float] | None = None) -> bool:
        """What was learnt of a verdict after it was stored (harness.results.drift.after_batch), merged into it in
        place: flags, and its baselines' medians in the round after it. The same judgment, known better, not a new one (no
        history row). False when no verdict has that key."""
        with self._tx() as db:
            row = db.execute("SELECT record FROM verdicts WHERE key = ?", (key,)).fetchone()
            if row is None:
                return False
            verdict = Verdict.model_validate_json(row[0])
            verdict.flags = merge_flags([*verdict.flags, *flags])
            if next_round_ms is not None and verdict.baseline_source is not None:
                verdict.baseline_source.next_round_ms = dict(next_round_ms)
            db.execute("UPDATE verdicts SET record = ? WHERE key = ?", (verdict.model_dump_json(), key))
        return True

    def record_eval(self, run: Run, judged: Sequence[tuple[Candidate, str, Verdict]], *, device_name: str,
                    listed_as: tuple[str | None, str | None] | None = None) -> int:
        """Store verdicts judged outside a generate run (`harness eval`, `harness bench`): the run
        (mode `eval` or `golden`), then each (candidate, verdict key, verdict), the verdict linked
        to its candidate. Returns how many were stored."""
        self.put_run(run, listed_as=listed_as)
        model, variant = listed_as or default_listing(run)
        for candidate, key, verdict in judged:
            self.put_candidate(candidate)
            self.put_verdict(key, verdict, device_name=device_name, run_id=run.id, model=model, variant=variant,
                             candidate_id=candidate.id)
        return len(judged)

    def get_verdict(self, key: str) -> Verdict | None:
        row = self.db.execute("SELECT record FROM verdicts WHERE key = ?", (key,)).fetchone()
        return Verdict.model_validate_json(row[0]) if row else None

    def history(self, key: str) -> list[tuple[str, Verdict]]:
        """The verdicts stored under `key` before the current one, oldest first, each with when it was made."""
        rows = self.db.execute("SELECT created, record FROM verdict_history WHERE key = ? ORDER BY rowid", (key,))
        return [(created, Verdict.model_validate_json(record)) for created, record in rows]

    def list_verdicts(self, *, run: str | None = None, model: str | None = None, problem: str | None = None,
                      size: str | None = None, variant: str | None = None, status: Status | str | None = None,
                      device_name: str | None = None, limit: int | None = None) -> list[VerdictRow]:
        """Judged candidates, one row per candidate of a run that has a verdict, filtered by any of:

        - `run`: run id; `model`: the run's model (`golden` for committed candidates);
          `variant`: the run's prompt variant;
        - `problem`, `size`, `device_name` (GPU name), `status`: the verdict's.

        A verdict reused by several runs (same source, problem, size, GPU and judge) appears
        once per run. Ordered by candidate id (the board orders what it shows). Candidates whose reply had no usable code have a `parse_error` verdict
        (made by the harness); samples whose request failed have none (see
        `list_generations`).
        """
        sql = (
            "SELECT c.run_id, c.id, c.sample, r.model, r.variant, v.problem, v.size, v.device_name, v.status,"
            " v.runtime_ms, v.source_sha256, v.key, v.created, v.record"
            " FROM candidates c JOIN verdicts v ON v.key = c.verdict_key JOIN runs r ON r.id = c.run_id WHERE 1 = 1"
        )
        args: list[Any] = []
        for column, value in (("c.run_id", run), ("r.model", model), ("r.variant", variant), ("v.problem", problem),
                              ("v.size", size), ("v.device_name", device_name),
                              ("v.status", status.value if isinstance(status, Status) else status)):
            if value is not None:
                sql += f" AND {column} = ?"
                args.append(value)
        sql += " ORDER BY c.id"
        if limit is not None:
            sql += " LIMIT ?"
            args.append(int(limit))
        rows = []
        for (run_id, cid, sample, model_, variant_, problem_, size_, device_, status_, runtime, sha, key, created,
             record) in self.db.execute(sql, args):
            rows.append(VerdictRow(
                run_id=run_id, candidate_id=cid, sample=sample, model=model_, variant=variant_, problem=problem_,
                size=size_, device_name=device_, status=Status(status_), runtime_ms=runtime, source_sha256=sha,
                verdict_key=key, created=created, verdict=Verdict.model_validate_json(record)))
        return rows


def open_store(path: Path | str, *, read_only: bool = False) -> Store:
    """Open (creating if needed, unless `read_only`) the store at `path`. Raises StoreError for a newer
    schema, or with `read_only` for any other."""
    return Store(path, read_only=read_only)
