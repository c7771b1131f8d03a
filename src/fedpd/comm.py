"""Communication is counted where messages pass, never estimated.

The round protocol (:mod:`fedpd.protocol`) sends every message through one :class:`CommCounter`: floats down (server →
clients) and up (clients → server), and the rounds in which anything was sent at all — so
FedPD's skipped rounds and SCAFFOLD's control variates show up in the metrics.

One exception: keys starting with ``metric_`` carry per-client diagnostic scalars (the local
residual a client reports with its upload, for the metrics only; see algorithms/base.py). They
are not part of any algorithm's protocol and are not counted.
"""

from __future__ import annotations

from torch import Tensor


#: the upload key under which every engine's client half sends each client's counted sample
#: gradients ([K] int64, fedpd.engine.train_in_chunks); the round protocol takes it off before
#: anything else sees the uploads (the clock reads it: fedpd.system), and it is never counted
WORK = "__sample_grads__"


def counted(message: dict[str, Tensor]) -> dict[str, Tensor]:
    """The tensors of ``message`` that are communication (not ``metric_*`` diagnostics or :data:`WORK`)."""
    return {k: t for k, t in message.items() if not k.startswith("metric_") and k != WORK}


def floats(message: dict[str, Tensor]) -> int:
    return sum(t.numel() for t in counted(message).values())


class CommCounter:
    def __init__(self):
        self.uplink_floats = 0
        self.downlink_floats = 0
        self.comm_rounds = 0
        self.rejected_uploads = 0  # uploads the server refused (NaN/Inf, wrong shape): see fedpd.screen
        self.dropouts = 0  # participants that received the round's message and sent nothing back
        self._active = False

    def down(self, message: dict[str, Tensor], recipients: int) -> None:
        """The same message sent to each of ``recipients`` clients."""
        n = floats(message) * recipients
        self.downlink_floats += n
        self._active |= n > 0

    def up(self, uploads: dict[str, Tensor]) -> None:
        """Uploads stacked over the sending clients ([K, ...] each)."""
        n = floats(uploads)
        self.uplink_floats += n
        self._active |= n > 0

    def end_round(self) -> None:
        self.comm_rounds += int(self._active)
        self._active = False

    def state_dict(self) -> dict:
        return {
            "uplink_floats": self.uplink_floats,
            "downlink_floats": self.downlink_floats,
            "comm_rounds": self.comm_rounds,
            "rejected_uploads": self.rejected_uploads,
            "dropouts": self.dropouts,
        }

    def load_state_dict(self, sd: dict) -> None:
        self.uplink_floats, self.downlink_floats, self.comm_rounds = (
            sd["uplink_floats"],
            sd["downlink_floats"],
            sd["comm_rounds"],
        )
        self.rejected_uploads, self.dropouts = sd["rejected_uploads"], sd["dropouts"]
