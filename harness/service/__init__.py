"""The judge for training loops: the library (`judge`: `harness.Judge`), the HTTP service (`server`: `harness serve`)
and its client (`client`: `harness.Client`)."""
