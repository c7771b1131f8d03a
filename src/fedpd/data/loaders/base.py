"""What every dataset format gives: the :class:`Dataset` in memory, the one-line :class:`NotFound`
naming where it looked, the data directory, and the conversions of raw arrays to tensors."""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from fedpd.errors import DataError

if TYPE_CHECKING:  # imported where a tensor is made: `fedpd data list` starts without torch
    import torch


@dataclass(repr=False)
class Dataset:
    """A dataset in memory.

    Images are float32 ``N x C x H x W`` in [0, 1]; token sequences are int64 ``N x L``; labels are int64.
    For LEAF data ``train_users`` / ``test_users`` give each sample's user index into ``users`` (the
    natural partition); they are None for the other datasets.
    """

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int
    train_users: torch.Tensor | None = None
    test_users: torch.Tensor | None = None
    users: list[str] | None = None
    classes: list[str] | None = None
    source: str = ""
    meta: dict = field(default_factory=dict)

    def __repr__(self) -> str:
        users = f", users={len(self.users)}" if self.users is not None else ""
        return (f"Dataset({self.name!r}, train={tuple(self.x_train.shape)}, test={tuple(self.x_test.shape)}, "
                f"num_classes={self.num_classes}{users}, source={self.source!r})")


class NotFound(DataError):
    """The dataset's files are not in any of the places looked at (``looked`` lists them)."""

    def __init__(self, message: str, looked: list[Path]):
        super().__init__(message)
        self.looked = looked


# ---------------------------------------------------------------------------------------------- data dir

def resolve_data_dir(explicit: str | os.PathLike | None = None) -> Path:
    """The data directory: ``explicit`` if given, else ``$FEDPD_DATA``, else ``$XDG_CACHE_HOME/fedpd/data``
    (``~/.cache/fedpd/data`` when XDG_CACHE_HOME is unset or not absolute)."""
    if explicit:
        return Path(explicit).expanduser()
    env = os.environ.get("FEDPD_DATA")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    cache = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return cache / "fedpd" / "data"


def looked_in(paths: list[Path]) -> str:
    return ", ".join(str(p) for p in paths)


def u8_images(x: np.ndarray) -> torch.Tensor:
    """uint8 N x C x H x W -> float32 in [0, 1] (converted by torch: several times faster than
    NumPy's cast on CIFAR-10's 150 M pixels, and the same floats)."""
    with warnings.catch_warnings():
        # a read-only array (np.frombuffer over a file's bytes) is fine here: the uint8 view is
        # only read, by the cast, which makes new storage
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        import torch

        return torch.from_numpy(np.ascontiguousarray(x)).to(torch.float32).div_(255.0)


def as_labels(y) -> torch.Tensor:
    import torch

    return torch.from_numpy(np.asarray(y, dtype=np.int64).copy())
