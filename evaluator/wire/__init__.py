"""What the evaluator's processes share: the records a verdict is made of, the protocol between the
parent, the referee and an executor, the exchange and the stage (shared memory), the problem's
definition, the judge's identity, the launcher's contract, and the few tensor helpers each side binds
for itself. It imports nothing else of the evaluator: every other folder may import it."""
