"""What an executor prints: its stdout and stderr read as they come (never while it is held), the last bytes kept."""

from __future__ import annotations

import threading


class CappedTail:
    """Keeps the last `cap` bytes written to it and counts all of them."""

    def __init__(self, cap: int):
        self.cap = cap
        self.total = 0
        self.buffer = bytearray()

    def feed(self, chunk: bytes) -> None:
        self.total += len(chunk)
        self.buffer += chunk
        if len(self.buffer) > 2 * self.cap:  # trim in batches, not on every chunk
            del self.buffer[: len(self.buffer) - self.cap]

    def tail(self, limit: int | None = None) -> bytes:
        data = bytes(self.buffer[-self.cap:])
        return data if limit is None else data[-limit:]

    @property
    def capped(self) -> bool:
        return self.total > self.cap


def drain(stream, tail: CappedTail, reading: threading.Event) -> None:
    try:
        while True:
            reading.wait()  # not while its executor is held: what it wrote before waits in the pipe
            chunk = stream.read1(1 << 16) if hasattr(stream, "read1") else stream.read(1 << 16)
            if not chunk:
                break
            tail.feed(chunk)
    except (OSError, ValueError):
        pass
