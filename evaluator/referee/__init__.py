"""The referee: the process that judges a batch on one device (`python -m evaluator.referee`) and never
runs candidate code. It owns the reference, the inputs, every comparison and every clock that ranks;
it starts each executor by command line (`launch.py`, `process.py`) and never imports their code. It
imports `evaluator.wire` only."""
