"""Stream keys: the identity of one model's stream, shared by the replay and the live engine.

Every stream is one learner configuration on one ordering of the data (a replay's permutation;
a live stream is permutation 0), optionally restricted to one entity (``--key-by``)::

    StreamKey(config="bogd-200", rep=0, entity=None).encode() == "bogd-200#0"
    StreamKey("bogd-200", 3, "user-17").encode() == "bogd-200#3@user-17"

The encoded string is the Beam key, so all of a stream's blocks (or a live model's records)
meet in one stateful DoFn.
"""

from __future__ import annotations

from typing import NamedTuple


class StreamKey(NamedTuple):
    """Identity of one stream: configuration name, repetition (permutation index), entity."""

    config: str
    rep: int
    entity: str | None = None

    def encode(self) -> str:
        check_config_name(self.config)
        base = f"{self.config}#{int(self.rep)}"
        return base if self.entity is None else f"{base}@{self.entity}"

    @classmethod
    def decode(cls, key: str) -> StreamKey:
        config, sep, rest = key.partition("#")
        if not sep:
            raise ValueError(f"not a stream key: {key!r}")
        rep, at, entity = rest.partition("@")
        return cls(config, int(rep), entity if at else None)

    def with_config(self, config: str) -> StreamKey:
        return self._replace(config=config)


def check_config_name(name: str) -> str:
    """Configuration names are the first field of the key, so they cannot hold ``#``/``@``."""
    if not name or "#" in name or "@" in name:
        raise ValueError(f"configuration names must be non-empty without '#' or '@': {name!r}")
    return name
