"""Measuring the judge and the golden kernels: `golden` (`harness bench`), `throughput` (candidates per minute) and
`build_cost` (what one build costs)."""
