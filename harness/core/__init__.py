"""What every activity shares: the harness's records (`records`), the resolved config (`config`), the result store,
the only SQL (`store`), every outcome's order and label (`outcomes`), whether a verdict ranks (`ranking`), which
stored verdicts are stale (`staleness`) and text helpers (`text`). Imports no other folder of the harness."""
