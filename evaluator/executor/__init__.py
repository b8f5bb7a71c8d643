"""The executor: the contained process next to one candidate (`python -m evaluator.executor`, started
through `launcher.py`), and the only code of the evaluator a candidate can reach. It imports
`evaluator.wire` only, and nothing it computes is trusted: the referee checks all of it."""
