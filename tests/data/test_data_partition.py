"""Partitioners: disjoint, covering, seeded, minimum sizes, fast even in extreme settings; helpers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from fedpd.data.partition import (dirichlet, format_label_matrix, iid, label_matrix, label_power_law, natural,
                                  partition, power_law, shards, train_test_split_per_client)
from fedpd.errors import ConfigError


def assert_partition(parts, n, min_size=1):
    assert all(p.dtype == np.int64 and p.ndim == 1 for p in parts)
    allidx = np.concatenate(parts)
    assert len(allidx) == n and np.array_equal(np.sort(allidx), np.arange(n)), "not a partition of range(n)"
    assert min(len(p) for p in parts) >= min_size


LABELS = np.repeat(np.arange(10), 100)  # 1 000 samples, 10 classes


def test_iid():
    parts = iid(LABELS, 7, seed=3)
    assert_partition(parts, 1000)
    assert {len(p) for p in parts} <= {142, 143}
    assert all(np.array_equal(a, b) for a, b in zip(parts, iid(1000, 7, seed=3)))  # a count works too


def test_dirichlet_cifar10_sized_extreme():
    """50 000 CIFAR-10-sized labels into 1 000 clients with alpha 0.01 and min_size 10 finishes in one pass."""
    labels = np.repeat(np.arange(10), 5000)
    np.random.default_rng(0).shuffle(labels)
    parts = dirichlet(labels, 1000, alpha=0.01, seed=0, min_size=10)
    assert len(parts) == 1000
    assert_partition(parts, 50000, min_size=10)
    m = label_matrix(labels, parts, 10)
    assert np.median((m > 0).sum(1)) <= 2  # strongly label-skewed


def test_dirichlet_seeded_and_skew():
    a = dirichlet(LABELS, 20, alpha=0.1, seed=5, min_size=5)
    b = dirichlet(LABELS, 20, alpha=0.1, seed=np.random.default_rng(5), min_size=5)
    c = dirichlet(LABELS, 20, alpha=0.1, seed=6, min_size=5)
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert any(not np.array_equal(x, y) for x, y in zip(a, c))
    assert_partition(a, 1000, 5)
    skewed = (label_matrix(LABELS, a) > 0).sum(1).mean()
    flat = (label_matrix(LABELS, dirichlet(LABELS, 20, alpha=100.0, seed=5)) > 0).sum(1).mean()
    assert skewed < flat
    assert_partition(dirichlet(torch.from_numpy(LABELS), 3, 1.0, 0), 1000)  # tensors accepted


def test_impossible_or_bad_arguments():
    for call in (lambda: dirichlet(LABELS, 101, 0.5, 0, min_size=10),
                 lambda: dirichlet(LABELS, 10, 0.0, 0),
                 lambda: dirichlet(LABELS, 0, 0.5, 0),
                 lambda: dirichlet(LABELS.astype(float), 2, 0.5, 0),
                 lambda: iid(LABELS, 1001, 0),
                 lambda: shards(LABELS, 600, 2, 0),
                 lambda: shards(LABELS, 10, 0, 0),
                 lambda: power_law(1000, 200, 0, min_size=6),
                 lambda: power_law(1000, 10, 0, exponent=-1),
                 lambda: natural(np.array([])),
                 lambda: partition("bogus", LABELS, 3),
                 lambda: partition("natural", LABELS, 3),
                 lambda: partition("iid", LABELS, None),
                 lambda: train_test_split_per_client([np.arange(3)], 1.0)):
        with pytest.raises(ConfigError) as e:
            call()
        assert "\n" not in str(e.value)
    with pytest.raises(ConfigError, match="1010 > 1000"):
        dirichlet(LABELS, 101, 0.5, 0, min_size=10)


def test_shards():
    labels = np.random.default_rng(1).permutation(LABELS)
    parts = shards(labels, 20, classes_per_client=2, seed=0)
    assert_partition(parts, 1000)
    assert {len(p) for p in parts} == {50}
    assert (label_matrix(labels, parts) > 0).sum(1).max() <= 2
    assert all(np.array_equal(x, y) for x, y in zip(parts, shards(labels, 20, 2, 0)))


def test_power_law():
    parts = power_law(LABELS, 50, seed=0, exponent=1.2, min_size=5)
    assert_partition(parts, 1000, 5)
    sizes = np.array([len(p) for p in parts])
    assert sizes.max() > 4 * np.median(sizes)  # heavy tail
    assert all(np.array_equal(x, y) for x, y in zip(parts, power_law(1000, 50, 0, 1.2, 5)))


def test_label_power_law():
    """FedProx's MNIST split: client k holds labels (k + j) mod 10 only, each label dealt to its
    holders in heavy-tailed amounts, at least min_size each; every sample dealt, seeded."""
    labels = np.random.default_rng(1).permutation(LABELS)
    parts = label_power_law(labels, 50, classes_per_client=1, seed=0, min_size=3)
    assert_partition(parts, 1000, 3)
    held = label_matrix(labels, parts) > 0
    assert all(held[k].tolist() == [c == k % 10 for c in range(10)] for k in range(50))  # one digit: k mod 10
    sizes = np.array([len(p) for p in parts])
    assert sizes.max() > 3 * np.median(sizes)  # power law: a heavy tail
    two = label_power_law(labels, 20, classes_per_client=2, seed=4, min_size=2)
    assert_partition(two, 1000, 4)
    assert all(set(np.flatnonzero(label_matrix(labels, two)[k])) == {k % 10, (k + 1) % 10} for k in range(20))
    assert all(np.array_equal(x, y) for x, y in zip(parts, partition("label_power_law", labels, 50, 0,
                                                                      classes_per_client=1, min_size=3)))
    for bad, words in ((lambda: label_power_law(labels, 9, 1, 0), "allowed: clients >= 10"),
                       (lambda: label_power_law(labels, 8, 2, 0), "allowed: clients >= 9"),
                       (lambda: label_power_law(labels, 10, 11, 0), "classes_per_client=11 > the 10 labels"),
                       (lambda: label_power_law(labels[labels != 3], 50, 1, 0, min_size=3),
                        "label 3 has 0 samples for 5"),
                       (lambda: label_power_law(labels, 50, 1, 0, min_size=30), "1500 > 1000 samples")):
        with pytest.raises(ConfigError, match=words):
            bad()


def test_natural():
    users = np.array([3, 1, 3, 2, 1, 3])
    parts = natural(users)
    assert [p.tolist() for p in parts] == [[1, 4], [3], [0, 2, 5]]
    assert [p.tolist() for p in partition("natural", None, user_ids=torch.tensor(users))] == [[1, 4], [3], [0, 2, 5]]


def test_train_test_split_per_client():
    parts = iid(LABELS, 4, 0)
    train, test = train_test_split_per_client(parts, 0.2, seed=0)
    for p, tr, te in zip(parts, train, test):
        assert len(te) == 50 and np.array_equal(np.sort(np.concatenate([tr, te])), p)
    tr, te = train_test_split_per_client([np.array([7])], 0.5, 0)
    assert tr[0].tolist() == [7] and te[0].size == 0  # always keeps one training sample


def test_label_matrix_and_text():
    parts = [np.array([0, 1, 100]), np.array([200, 201])]
    m = label_matrix(LABELS, parts, 10)
    assert m.shape == (2, 10) and m[0, 0] == 2 and m[0, 1] == 1 and m[1, 2] == 2 and m.sum() == 5
    text = format_label_matrix(m)
    assert "2 clients, 5 samples, 10 classes" in text and len(text.splitlines()) == 4
    big = label_matrix(LABELS, iid(LABELS, 100, 0), 10)
    summary = format_label_matrix(big)
    assert "100 clients" in summary and "samples per client" in summary and len(summary.splitlines()) < 10
    wide = format_label_matrix(np.eye(3, 62, dtype=np.int64) * 4)
    assert "top 0:4" in wide and len(wide.splitlines()) == 4


# ---------------------------------------------------------------------------------------------- balanced

def _priors(seed, alpha, n_clients, n_classes):
    """The clients' label mixes a balanced split of ``seed`` draws first (its first draws)."""
    from fedpd.data.partition import _dirichlet_weights
    rng = np.random.default_rng(seed)
    return np.stack([_dirichlet_weights(rng, alpha, n_classes) for _ in range(n_clients)])


@pytest.mark.parametrize("alpha", [0.1, 1.0])
def test_balanced_dirichlet_equal_sizes_and_the_drawn_mixes(alpha):
    """FL-Simulator's split: 50 000 CIFAR-10-sized labels, 100 clients of exactly 500 samples, each
    client's histogram the multinomial of its own Dir(alpha) draw, up to the draws a class that ran
    out moved elsewhere (a few per cent; the multinomial's own spread is about 0.1 in L1)."""
    labels = np.random.default_rng(0).permutation(np.repeat(np.arange(10), 5000))
    parts = dirichlet(labels, 100, alpha, seed=3, balanced=True)
    assert_partition(parts, 50000, min_size=500)
    assert {len(p) for p in parts} == {500}
    m = label_matrix(labels, parts, 10)
    p = _priors(3, alpha, 100, 10)
    l1 = np.abs(m / 500 - p).sum(1)
    assert np.median(l1) < 0.2 and l1.max() < 0.6, (np.median(l1), l1.max())
    assert np.abs(m - 500 * p).sum() / 2 < 0.12 * 50000  # draws moved, with the multinomial's noise
    # a client holds almost nothing of a class its mix gives ~0 (only what an exhausted class moved)
    assert m[p < 1e-6].sum() < 0.03 * 50000
    # the mix follows the draw, not the size: a per-class split has unequal sizes at the same alpha
    assert len({len(q) for q in dirichlet(labels, 100, alpha, seed=3)}) > 1


def test_balanced_dirichlet_seeded_uneven_and_small():
    y = np.arange(1003) % 7
    a = dirichlet(y, 10, 0.5, seed=1, balanced=True)
    assert all(np.array_equal(u, v) for u, v in zip(a, dirichlet(y, 10, 0.5, seed=np.random.default_rng(1),
                                                                  balanced=True)))
    assert_partition(a, 1003)
    assert sorted(len(p) for p in a) == [100] * 7 + [101] * 3
    for alpha in (0.01, 1e-3):  # mixes on one class: late clients take what is left, still disjoint
        assert_partition(dirichlet(LABELS, 40, alpha, seed=0, balanced=True), 1000, min_size=25)
    assert_partition(partition("dirichlet", LABELS, 8, 2, alpha=0.3, balanced=True), 1000, min_size=125)


def test_balanced_bad_options_are_one_line():
    for call in (lambda: partition("iid", LABELS, 4, balanced=True),
                 lambda: partition("shards", LABELS, 4, balanced=True),
                 lambda: dirichlet(LABELS, 4, 0.5, 0, balanced="yes"),
                 lambda: dirichlet(LABELS, 1001, 0.5, 0, balanced=True)):
        with pytest.raises(ConfigError) as e:
            call()
        assert "\n" not in str(e.value)
