"""Datasets for fedpd: loaders for standard public formats, checksums, downloads, client partitions and
batch augmentation.

    >>> from fedpd.data import load_dataset, dirichlet
    >>> ds = load_dataset("mnist")                  # from $FEDPD_DATA or ~/.cache/fedpd/data
    >>> parts = dirichlet(ds.y_train, n_clients=100, alpha=0.1, seed=0, min_size=10)
"""

from fedpd.data.download import download
from fedpd.data.partition import (PARTITIONS, dirichlet, format_label_matrix, iid, label_matrix, natural, partition,
                                  power_law, shards, train_test_split_per_client)
from fedpd.exports import lazy

__all__ = [
    "DATASETS",
    "LEAF_CHARS",
    "Dataset",
    "dataset_status",
    "load_dataset",
    "load_image_folder",
    "load_glove",
    "read_idx",
    "resolve_data_dir",
    "download",
    "random_crop_flip",
    "PARTITIONS",
    "iid",
    "dirichlet",
    "shards",
    "power_law",
    "natural",
    "partition",
    "train_test_split_per_client",
    "label_matrix",
    "format_label_matrix",
]
# `download` and `partition` (NumPy at most) are imported above: they are also the names of their
# modules, and a module loaded after its function had been looked up would take the name back.
# The rest needs torch, imported on first use:
__getattr__, __dir__ = lazy(__name__, {
    "random_crop_flip": "fedpd.data.augment",
    **dict.fromkeys(["DATASETS", "LEAF_CHARS", "Dataset", "dataset_status", "load_dataset", "load_glove",
                     "load_image_folder", "read_idx", "resolve_data_dir"], "fedpd.data.loaders")})
