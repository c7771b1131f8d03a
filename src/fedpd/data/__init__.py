"""Datasets for fedpd: loaders for standard public formats, checksums, downloads, client partitions and
batch augmentation.

    >>> from fedpd.data import load_dataset, dirichlet
    >>> ds = load_dataset("mnist")                  # from $FEDPD_DATA or ~/.cache/fedpd/data
    >>> parts = dirichlet(ds.y_train, n_clients=100, alpha=0.1, seed=0, min_size=10)
"""

from fedpd.data.augment import random_crop_flip
from fedpd.data.download import download
from fedpd.data.loaders import (DATASETS, LEAF_CHARS, Dataset, dataset_status, load_dataset, load_glove,
                                load_image_folder, read_idx, resolve_data_dir)
from fedpd.data.partition import (PARTITIONS, dirichlet, format_label_matrix, iid, label_matrix, natural, partition,
                                  power_law, shards, train_test_split_per_client)

__all__ = [
    "DATASETS", "LEAF_CHARS", "Dataset", "dataset_status", "load_dataset", "load_image_folder", "load_glove", "read_idx",
    "resolve_data_dir", "download", "random_crop_flip", "PARTITIONS", "iid", "dirichlet", "shards", "power_law",
    "natural", "partition", "train_test_split_per_client", "label_matrix", "format_label_matrix",
]
