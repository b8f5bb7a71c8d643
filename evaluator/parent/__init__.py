"""The parent: the harness's side of an evaluation (`evaluate()`, `Evaluator`): the static gate, the
compile-only builds, the lanes (one per GPU, local or Ray) and the referee each lane runs. It imports
`evaluator.wire`, `evaluator.checks` and `evaluator.referee` (the referee's config, and the executor
process handle for its builds); nothing imports it but the harness."""
