"""TensorBoard scalars of a run (``run.tensorboard = true``): every metric of every evaluation is
also written as a scalar (tag = the metric's key, step = the round) into an event file in the
run directory, flushed at each evaluation, so ``tensorboard --logdir runs`` shows runs live.

Writing needs the optional extra ``pip install 'fedpd[tensorboard]'`` (tensorboardX, light: numpy
and protobuf); viewing needs TensorBoard itself (``pip install tensorboard``). :func:`read_scalars`
reads the event files back (used by the tests; handy in notebooks).
"""

from __future__ import annotations

import secrets
import struct
from pathlib import Path

from fedpd.errors import ConfigError

INSTALL = "pip install 'fedpd[tensorboard]' (tensorboardX)"


def require() -> None:
    """Raise one ConfigError line if the writer's package is missing."""
    try:
        import tensorboardX  # noqa: F401
    except ImportError:
        raise ConfigError(f"run.tensorboard: needs tensorboardX, which is not installed: {INSTALL} "
                          f"(allowed without it: run.tensorboard = false)") from None


class ScalarWriter:
    """Writes metric records as TensorBoard scalars into ``out_dir``.

    ``start``: the round a resumed run continues from; events a killed run wrote for later
    rounds are then hidden from TensorBoard (tensorboardX's ``purge_step``)."""

    def __init__(self, out_dir: str | Path, start: int = 0):
        require()
        from tensorboardX import SummaryWriter

        # a resumed run opens a new file: the suffix keeps it from replacing one opened the same second
        self._writer = SummaryWriter(logdir=str(out_dir), purge_step=start + 1 if start else None, flush_secs=30,
                                     filename_suffix=f".r{start}.{secrets.token_hex(3)}")

    def add(self, record: dict) -> None:
        step = int(record.get("round", 0))
        for key, value in record.items():
            if key != "round" and isinstance(value, (int, float)) and not isinstance(value, bool):
                self._writer.add_scalar(key, float(value), global_step=step)
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


def open_writer(out_dir, start: int = 0, *, enabled: bool) -> ScalarWriter | None:
    """The run's writer, or None when ``run.tensorboard`` (``enabled``) is off or nothing is written."""
    if out_dir is None or not enabled:
        return None
    return ScalarWriter(out_dir, start)


def _records(path: Path):
    """The records of one TFRecord file (8-byte length, 4-byte CRC, data, 4-byte CRC)."""
    data = path.read_bytes()
    pos = 0
    while pos + 12 <= len(data):
        (length,) = struct.unpack("<Q", data[pos:pos + 8])
        start = pos + 12
        if start + length + 4 > len(data):
            break  # a record cut short (the writer was killed): ignore it
        yield data[start:start + length]
        pos = start + length + 4


def read_scalars(run_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the event files of ``run_dir``: {tag: [(step, value), ...]} in file order
    (a resumed run's later file after the earlier one; purged steps are not removed)."""
    require()
    from tensorboardX.proto import event_pb2

    files = []
    for path in Path(run_dir).glob("events.out.tfevents.*"):
        events = [event_pb2.Event.FromString(raw) for raw in _records(path)]
        files.append((events[0].wall_time if events else 0.0, path.name, events))
    out: dict[str, list[tuple[int, float]]] = {}
    for _, _, events in sorted(files, key=lambda f: (f[0], f[1])):  # in the order they were written
        for event in events:
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    out.setdefault(value.tag, []).append((event.step, value.simple_value))
    return out
