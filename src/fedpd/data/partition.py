"""Client partitions: which sample indices each simulated client holds.

Every partitioner returns ``list[np.ndarray]`` (one sorted int64 index array per client); the arrays are
disjoint and together cover every sample. Randomness comes from a ``numpy.random.Generator`` or an int seed,
so a seed gives the same partition every time. None of them retries: they finish in one pass.

* ``iid``: uniform shuffle, equal sizes (+-1).
* ``dirichlet``: per class, client shares ~ Dir(alpha) (Hsu, Qi & Brown 2019; Yurochkin et al. 2019);
  clients under ``min_size`` then take samples from the largest clients, deterministically.
  ``balanced``: equal client sizes, each client's label mix ~ Dir(alpha) (FL-Simulator's ``dataset.py``).
* ``shards``: sort by label, cut into ``n_clients * classes_per_client`` shards, deal them out
  (McMahan et al. 2017, "pathological non-IID").
* ``power_law``: client sizes from a Pareto law, labels i.i.d. (Li et al. 2020, FedProx).
* ``label_power_law``: client k holds only the labels (k + j) mod L, j < ``classes_per_client``, in
  lognormal (power-law) amounts: FedProx's MNIST generator (Li et al. 2020: 1 000 devices, 2 digits
  each; Fed+, Kundu et al. 2022, §5.2: one digit each).
* ``natural``: one client per user id (LEAF).
"""

from __future__ import annotations

import heapq

import numpy as np

from fedpd.errors import ConfigError

PARTITIONS = ("iid", "dirichlet", "shards", "power_law", "label_power_law", "natural")


def _rng(seed) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


def _array(x) -> np.ndarray:
    if hasattr(x, "detach"):  # torch tensor
        x = x.detach().cpu().numpy()
    return np.asarray(x)


def _as_labels(labels, what: str) -> np.ndarray:
    y = _array(labels)
    if y.ndim != 1 or not np.issubdtype(y.dtype, np.integer):
        raise ConfigError(f"{what}: labels have shape {y.shape} and dtype {y.dtype}, expected a 1-D integer array")
    if len(y) and y.min() < 0:
        raise ConfigError(f"{what}: negative label {int(y.min())}, expected labels >= 0")
    return y.astype(np.int64, copy=False)


def _check(n: int, n_clients, min_size: int, what: str) -> None:
    if not isinstance(n_clients, (int, np.integer)) or isinstance(n_clients, bool) or n_clients < 1:
        raise ConfigError(f"{what}: n_clients={n_clients!r}, expected an integer >= 1")
    if not isinstance(min_size, (int, np.integer)) or min_size < 0:
        raise ConfigError(f"{what}: min_size={min_size!r}, expected an integer >= 0")
    need = n_clients * max(min_size, 1)
    if need > n:
        raise ConfigError(f"{what}: {n_clients} clients x min_size {max(min_size, 1)} = {need} > {n} samples; "
                          f"use fewer clients or a smaller min_size")


def _groups(owner: np.ndarray, n_clients: int) -> list[np.ndarray]:
    """Indices grouped by owner; a stable sort keeps each group's indices ascending."""
    order = np.argsort(owner, kind="stable")
    counts = np.bincount(owner, minlength=n_clients)
    return [g.astype(np.int64) for g in np.split(order, np.cumsum(counts)[:-1])]


def iid(labels, n_clients: int, seed=0) -> list[np.ndarray]:
    """Shuffle and cut into ``n_clients`` parts of equal size (+-1). ``labels`` may also be a sample count."""
    n = int(labels) if np.isscalar(labels) else len(_array(labels))
    _check(n, n_clients, 1, "iid")
    perm = _rng(seed).permutation(n)
    return [np.sort(p) for p in np.array_split(perm, n_clients)]


def _dirichlet_weights(rng: np.random.Generator, alpha: float, k: int) -> np.ndarray:
    """One Dir(alpha, ..., alpha) draw, computed in log space so tiny alpha (0.01) never underflows to 0/0.

    Uses Gamma(alpha) = Gamma(alpha + 1) * U^(1/alpha)."""
    log_g = np.log(rng.gamma(alpha + 1.0, size=k)) + np.log1p(-rng.random(k)) / alpha
    w = np.exp(log_g - log_g.max())
    return w / w.sum()


def _enforce_min_size(owner: np.ndarray, n_clients: int, min_size: int, rng: np.random.Generator) -> None:
    """Give every client below ``min_size`` random samples of the currently largest clients (in place).

    One pass over the short clients with a max-heap of donors: a short client takes what it lacks from the
    largest client (so it keeps that client's label mix), or from the next largest when that one reaches
    ``min_size``; at most (short clients + donors) steps."""
    sizes = np.bincount(owner, minlength=n_clients)
    short = np.flatnonzero(sizes < min_size)
    if not len(short):
        return
    order = np.argsort(owner, kind="stable")
    starts = np.concatenate([[0], np.cumsum(sizes)])
    pools: dict[int, np.ndarray] = {}
    used = np.zeros(n_clients, np.int64)
    heap = [(-int(s), int(k)) for k, s in enumerate(sizes) if s > min_size]
    heapq.heapify(heap)
    for r in short:
        need = min_size - int(sizes[r])
        while need > 0:
            neg, d = heapq.heappop(heap)
            size_d = -neg
            take = min(need, size_d - min_size)
            if d not in pools:
                pools[d] = rng.permutation(order[starts[d]:starts[d + 1]])
            moved = pools[d][used[d]:used[d] + take]
            used[d] += take
            owner[moved] = r
            sizes[d] -= take
            sizes[r] += take
            need -= take
            if sizes[d] > min_size:
                heapq.heappush(heap, (-int(sizes[d]), d))


def dirichlet(labels, n_clients: int, alpha: float = 0.5, seed=0, min_size: int = 1,
              balanced: bool = False) -> list[np.ndarray]:
    """Label-skewed partition: for each class, client shares ~ Dir(alpha); small alpha = few classes per client.

    Clients left with fewer than ``min_size`` samples get random samples moved from the largest clients.

    ``balanced``: the split of the A-FedPD / FedSpeed authors' simulator (FL-Simulator,
    ``dataset.py``, rule ``Dirichlet``): every client holds n/N samples (+-1) and its label mix
    p_i ~ Dir(alpha) over the C classes. The n places are filled in a random order; each place's
    client draws a class from p_i restricted to the classes that still have samples (renormalised;
    from the remaining supply when p_i has no mass left there), and takes a random sample of that class
    not yet given out. So a client's label histogram is multinomial(n/N, p_i) up to the draws moved
    because a class ran out. The simulator instead refills a class that runs out (its samples
    are then held twice and others by nobody); here the split stays disjoint and covers every
    sample (the late draws of an exhausted class go to the classes left). ``min_size`` is met
    whenever ``_check`` passes (n/N >= min_size)."""
    y = _as_labels(labels, "dirichlet")
    _check(len(y), n_clients, min_size, "dirichlet")
    if not np.isfinite(alpha) or alpha <= 0:
        raise ConfigError(f"dirichlet: alpha={alpha!r}, expected a number > 0")
    if not isinstance(balanced, (bool, np.bool_)):
        raise ConfigError(f"dirichlet: balanced={balanced!r}, expected true or false")
    rng = _rng(seed)
    if balanced:
        return _groups(_balanced_owner(y, n_clients, float(alpha), rng), n_clients)
    owner = np.empty(len(y), np.int64)
    for c in np.unique(y):
        idx = rng.permutation(np.flatnonzero(y == c))
        counts = rng.multinomial(len(idx), _dirichlet_weights(rng, float(alpha), n_clients))
        owner[idx] = np.repeat(np.arange(n_clients), counts)
    _enforce_min_size(owner, n_clients, max(min_size, 1), rng)
    return _groups(owner, n_clients)


def _balanced_owner(y: np.ndarray, n_clients: int, alpha: float, rng: np.random.Generator) -> np.ndarray:
    """Owner of every sample for ``dirichlet(..., balanced=True)``; see :func:`dirichlet`."""
    n = len(y)
    classes, y_idx = np.unique(y, return_inverse=True)
    c = len(classes)
    priors = np.stack([_dirichlet_weights(rng, alpha, c) for _ in range(n_clients)])  # [N, C] the clients' mixes
    sizes = np.full(n_clients, n // n_clients)
    sizes[:n % n_clients] += 1
    slots = rng.permutation(np.repeat(np.arange(n_clients), sizes))  # the order the n places are filled in
    u = rng.random(n)
    left = np.bincount(y_idx, minlength=c)  # samples of each class not yet given out
    label = np.empty(n, np.int64)
    start = 0
    while start < n:  # one pass per class that runs out: at most C passes
        w = priors[slots[start:]] * (left > 0)
        empty = w.sum(1) <= 0  # a client whose whole mix is on classes that ran out: by what is left
        w[empty] = left
        cdf = np.cumsum(w, 1)
        last = c - 1 - np.argmax(w[:, ::-1] > 0, 1)  # u·total rounded up to the total: the last open class
        draw = np.minimum((u[start:, None] * cdf[:, -1:] >= cdf).sum(1), last)
        order = np.argsort(draw, kind="stable")  # the slots of each class, in filling order
        first = np.searchsorted(draw[order], np.arange(c))
        rank = np.empty(len(draw), np.int64)
        rank[order] = np.arange(len(draw)) - first[draw[order]]
        over = np.flatnonzero(rank >= left[draw])  # slots whose class has run out by then
        stop = len(draw) if not len(over) else int(over[0])
        label[start:start + stop] = draw[:stop]
        left -= np.bincount(draw[:stop], minlength=c)
        start += stop
    owner = np.empty(n, np.int64)
    by_class = np.argsort(label, kind="stable")  # the filled places, grouped by class in filling order
    samples = np.concatenate([rng.permutation(np.flatnonzero(y_idx == k)) for k in range(c)])
    owner[samples] = slots[by_class]
    return owner


def shards(labels, n_clients: int, classes_per_client: int = 2, seed=0) -> list[np.ndarray]:
    """Sort by label (random order within a label), cut into ``n_clients * classes_per_client`` equal shards
    and give each client ``classes_per_client`` random shards (a client may get two shards of one class)."""
    y = _as_labels(labels, "shards")
    if not isinstance(classes_per_client, (int, np.integer)) or classes_per_client < 1:
        raise ConfigError(f"shards: classes_per_client={classes_per_client!r}, expected an integer >= 1")
    _check(len(y), n_clients, classes_per_client, "shards")
    rng = _rng(seed)
    perm = rng.permutation(len(y))
    pieces = np.array_split(perm[np.argsort(y[perm], kind="stable")], n_clients * classes_per_client)
    deal = rng.permutation(n_clients * classes_per_client).reshape(n_clients, classes_per_client)
    return [np.sort(np.concatenate([pieces[s] for s in row])) for row in deal]


def power_law(n_samples, n_clients: int, seed=0, exponent: float = 1.5, min_size: int = 1) -> list[np.ndarray]:
    """Unbalanced sizes, i.i.d. labels: client weights ~ Pareto(exponent) (x_min = 1), each client gets
    ``min_size`` samples plus a multinomial share of the rest. ``n_samples`` may also be a label array."""
    n = int(n_samples) if np.isscalar(n_samples) else len(_array(n_samples))
    _check(n, n_clients, min_size, "power_law")
    if not np.isfinite(exponent) or exponent <= 0:
        raise ConfigError(f"power_law: exponent={exponent!r}, expected a number > 0")
    rng = _rng(seed)
    w = rng.pareto(exponent, n_clients) + 1.0
    sizes = max(min_size, 1) + rng.multinomial(n - n_clients * max(min_size, 1), w / w.sum())
    perm = rng.permutation(n)
    return [np.sort(p) for p in np.split(perm, np.cumsum(sizes)[:-1])]


#: σ of the lognormal shares of :func:`label_power_law` (FedProx's generator: ``np.random.lognormal(0, 2.0)``)
LABEL_POWER_LAW_SIGMA = 2.0


def label_power_law(labels, n_clients: int, classes_per_client: int = 1, seed=0, min_size: int = 1) -> list[np.ndarray]:
    """Label skew with power-law sizes, after FedProx's MNIST generator (Li et al. 2020, data/mnist):
    with L labels, client k holds the labels (k + j) mod L for j < ``classes_per_client``; each label's
    samples go to its holders, ``min_size`` to each and the rest in shares ∝ lognormal(0, 2) weights
    (one per client and label: a heavy tail of sizes), as a multinomial draw. Every sample is dealt, so
    every label needs a holder: at least L − classes_per_client + 1 clients."""
    y = _as_labels(labels, "label_power_law")
    if not isinstance(classes_per_client, (int, np.integer)) or classes_per_client < 1:
        raise ConfigError(f"label_power_law: classes_per_client={classes_per_client!r}, expected an integer >= 1")
    _check(len(y), n_clients, min_size, "label_power_law")
    n_labels = int(y.max()) + 1 if len(y) else 0
    if classes_per_client > n_labels:
        raise ConfigError(f"label_power_law: classes_per_client={classes_per_client} > the {n_labels} labels "
                          f"(allowed: 1..{n_labels})")
    if n_clients + classes_per_client - 1 < n_labels:
        raise ConfigError(f"label_power_law: {n_clients} clients of {classes_per_client} label(s) each leave labels "
                          f"without a client (allowed: clients >= {n_labels - classes_per_client + 1})")
    rng = _rng(seed)
    weights = rng.lognormal(0.0, LABEL_POWER_LAW_SIGMA, (n_clients, classes_per_client))
    owner = np.empty(len(y), dtype=np.int64)
    for label in range(n_labels):
        slots = [(k, j) for k in range(n_clients) for j in range(classes_per_client) if (k + j) % n_labels == label]
        members = rng.permutation(np.flatnonzero(y == label))
        floor = max(min_size, 0) * len(slots)
        if floor > len(members):
            raise ConfigError(f"label_power_law: label {label} has {len(members)} samples for {len(slots)} clients "
                              f"x min_size {min_size} (allowed: a smaller min_size or fewer clients)")
        w = np.array([weights[k, j] for k, j in slots])
        sizes = max(min_size, 0) + rng.multinomial(len(members) - floor, w / w.sum())
        for (k, _), part in zip(slots, np.split(members, np.cumsum(sizes)[:-1])):
            owner[part] = k
    return _groups(owner, n_clients)


def natural(user_ids) -> list[np.ndarray]:
    """One client per distinct user id (in sorted id order): the natural partition of LEAF data."""
    u = _array(user_ids)
    if u.ndim != 1 or len(u) == 0:
        raise ConfigError(f"natural: user ids have shape {u.shape}, expected a non-empty 1-D array")
    uniq, inverse = np.unique(u, return_inverse=True)
    return _groups(inverse.reshape(-1), len(uniq))


def partition(method: str, labels, n_clients: int | None = None, seed=0, *, alpha: float = 0.5,
              classes_per_client: int = 2, min_size: int = 1, exponent: float = 1.5,
              user_ids=None, balanced: bool = False) -> list[np.ndarray]:
    """Dispatch by name (one of ``PARTITIONS``); ``natural`` uses ``user_ids`` and ignores ``n_clients``;
    ``balanced`` is the dirichlet partition's only (equal client sizes)."""
    if balanced and method != "dirichlet":
        raise ConfigError(f"balanced: applies to the dirichlet partition only, not {method!r} (allowed: false)")
    if method == "natural":
        if user_ids is None:
            raise ConfigError(
                "natural partition needs per-sample user ids (LEAF datasets: femnist, shakespeare, sent140)"
            )
        return natural(user_ids)
    if method not in PARTITIONS:
        raise ConfigError(f"unknown partition {method!r}; expected one of {', '.join(PARTITIONS)}")
    if n_clients is None:
        raise ConfigError(f"{method} partition needs a number of clients (--clients N)")
    if method == "iid":
        return iid(labels, n_clients, seed)
    if method == "dirichlet":
        return dirichlet(labels, n_clients, alpha, seed, min_size, balanced)
    if method == "shards":
        return shards(labels, n_clients, classes_per_client, seed)
    if method == "label_power_law":
        return label_power_law(labels, n_clients, classes_per_client, seed, min_size)
    return power_law(labels, n_clients, seed, exponent, min_size)


def train_test_split_per_client(parts: list[np.ndarray], test_fraction: float = 0.2,
                                seed=0) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Split each client's indices into (train, test) with ``round(test_fraction * n)`` test samples,
    always leaving at least one training sample."""
    if not 0 <= test_fraction < 1:
        raise ConfigError(f"test_fraction={test_fraction!r}, expected 0 <= test_fraction < 1")
    rng = _rng(seed)
    train, test = [], []
    for p in parts:
        p = rng.permutation(np.asarray(p, dtype=np.int64))
        k = min(int(round(test_fraction * len(p))), max(len(p) - 1, 0))
        test.append(np.sort(p[:k]))
        train.append(np.sort(p[k:]))
    return train, test


def label_matrix(labels, parts: list[np.ndarray], num_classes: int | None = None) -> np.ndarray:
    """Counts ``[n_clients, num_classes]``: how many samples of each class each client holds."""
    y = _as_labels(labels, "label_matrix")
    c = int(num_classes) if num_classes is not None else (int(y.max()) + 1 if len(y) else 0)
    if len(y) and y.max() >= c:
        raise ConfigError(f"label_matrix: label {int(y.max())} >= num_classes {c}")
    m = np.zeros((len(parts), c), np.int64)
    for k, p in enumerate(parts):
        m[k] = np.bincount(y[np.asarray(p, dtype=np.int64)], minlength=c)
    return m


def _stats(v: np.ndarray, fmt: str = "d") -> str:
    vals = (v.min(), np.median(v), v.mean(), v.max())
    if fmt == "d":
        return "min {:d}  median {:g}  mean {:.1f}  max {:d}".format(int(vals[0]), vals[1], vals[2], int(vals[3]))
    return "min {:.2f}  median {:.2f}  mean {:.2f}  max {:.2f}".format(*vals)


def format_label_matrix(matrix: np.ndarray, class_names: list[str] | None = None, max_clients: int = 30) -> str:
    """Text rendering for a terminal: per client the count of each class (top classes when there are more
    than 20), or a summary when there are more than ``max_clients`` clients."""
    m = np.asarray(matrix)
    k, c = m.shape
    sizes = m.sum(1)
    lines = [f"{k} clients, {int(sizes.sum())} samples, {c} classes"]
    if k > max_clients:
        present = (m > 0).sum(1)
        share = m.max(1) / np.maximum(sizes, 1)
        lines += [f"samples per client:   {_stats(sizes)}",
                  f"classes per client:   {_stats(present)}",
                  f"largest-class share:  {_stats(share, 'f')}",
                  f"empty clients: {int((sizes == 0).sum())}"]
        return "\n".join(lines)
    if c <= 20:
        heads = [str(class_names[j]) if class_names else str(j) for j in range(c)]
        w = max(max(len(h) for h in heads), len(str(int(m.max()))) if m.size else 1)
        wn = max(len(str(int(sizes.max()))), 1)
        lines.append(f"{'client':>6} {'n':>{wn}} | " + " ".join(h[:w].rjust(w) for h in heads))
        for i in range(k):
            lines.append(f"{i:>6} {int(sizes[i]):>{wn}} | " + " ".join(str(int(v)).rjust(w) for v in m[i]))
        return "\n".join(lines)
    for i in range(k):
        top = np.argsort(-m[i], kind="stable")[:3]
        tops = ", ".join(f"{class_names[j] if class_names else j}:{int(m[i, j])}" for j in top if m[i, j] > 0)
        lines.append(f"client {i:>3}: n={int(sizes[i])}, {int((m[i] > 0).sum())} classes, top {tops}")
    return "\n".join(lines)
