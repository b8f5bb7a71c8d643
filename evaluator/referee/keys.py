"""Seeds no executor can derive.

Every seed the referee draws inputs from, hands to an executor, or uses to choose (where a clocked
call's output goes) is a keyed hash (BLAKE2b) of a secret and a label: the batch's secret, drawn with
`secrets` when the referee starts, whatever seed the user pinned, and never sent anywhere. A candidate
sees some of the seeds (`torch.initial_seed()` after its construction, its inputs, the place it is asked
to stage at); from them it learns nothing of any other, since the hash is one-way and keyed. Each
candidate gets a key of its own (`Keys.derive`), recorded in its verdict once it is judged
(`Correctness.check_key`): with it, every seed of that candidate's checks can be made again.
"""

from __future__ import annotations

import hashlib
import secrets

KEY_BYTES = 32


class Keys:
    """Seeds derived from one secret key (see the module's docstring)."""

    def __init__(self, key: bytes | None = None):
        self.key = key if key is not None else secrets.token_bytes(KEY_BYTES)
        self._drawn: dict[str, int] = {}

    def _digest(self, labels: tuple, size: int) -> bytes:
        message = "\0".join(str(label) for label in labels).encode()
        return hashlib.blake2b(message, key=self.key, digest_size=size).digest()

    def derive(self, *labels) -> Keys:
        """A key of its own for `labels` (one candidate's): its seeds tell nothing of this key's."""
        return Keys(self._digest(("key", *labels), KEY_BYTES))

    def seed(self, *labels) -> int:
        """A 31-bit seed for `labels` (a torch generator's or torch.manual_seed's)."""
        return int.from_bytes(self._digest(("seed", *labels), 8), "big") & 0x7FFFFFFF

    def unit(self, *labels) -> float:
        """A number in [0, 1) for `labels`."""
        return int.from_bytes(self._digest(("unit", *labels), 8), "big") / 2**64

    def next_seed(self, purpose: str) -> int:
        """The next seed of a sequence (`purpose`'s first, second, ...)."""
        index = self._drawn.get(purpose, 0)
        self._drawn[purpose] = index + 1
        return self.seed(purpose, index)

    def next_unit(self, purpose: str) -> float:
        index = self._drawn.get(purpose, 0)
        self._drawn[purpose] = index + 1
        return self.unit(purpose, index)

    @property
    def hex(self) -> str:
        return self.key.hex()
