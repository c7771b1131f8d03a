"""The built-in problem generators: the shapes the papers give, the heterogeneity they describe,
a train and a test split per client, and seeded determinism."""

from __future__ import annotations

import pytest
import torch

from fedpd.problems.synthetic import fedprox_synthetic, fedpd_logreg, least_squares


def client(split, i):
    a, b = int(split.offsets[i]), int(split.offsets[i + 1])
    return split.x[a:b], split.y[a:b]


def fit(a, b):
    """Least-squares weights w with a w ≈ b."""
    return torch.linalg.lstsq(a, b[:, None]).solution[:, 0]


def directions(problem, clients=10):
    """Per client, the moment estimate mean(b·a) of its ground truth's direction (features
    without the constant), normalised: for Gaussian a and b = sign(aᵀx* + noise) it points along x*."""
    out = []
    for i in range(clients):
        a, b = client(problem.train, i)
        w = (b[:, None] * a[:, :-1]).mean(0)
        out.append(w / w.norm())
    w = torch.stack(out)
    cos = w @ w.T
    return cos[~torch.eye(clients, dtype=torch.bool)]  # pairwise cosines between clients


# --- FedPD's penalised logistic regression ---------------------------------------------------


def test_fedpd_logreg_is_100_agents_of_400_samples_in_20_dimensions():
    p = fedpd_logreg()
    assert p.num_clients == p.test.num_clients == 100
    assert p.train.sizes.tolist() == [400] * 100 and p.test.sizes.tolist() == [100] * 100
    assert p.train.x.shape == (40_000, 20) and p.dim == 20
    assert torch.equal(p.train.x[:, -1], torch.ones(40_000, dtype=torch.float64))  # the constant feature
    assert p.train.x[:, :-1].std(0).min() > 0.9  # the others standard normal
    assert set(p.train.y.unique().tolist()) == {-1.0, 1.0} and p.classifies


def test_fedpd_logreg_weak_shares_one_ground_truth_strong_draws_one_per_agent():
    weak = directions(fedpd_logreg(non_iid="weak", clients=10))
    strong = directions(fedpd_logreg(non_iid="strong", clients=10))
    assert weak.min() > 0.8  # every agent's labels follow the same separating direction
    assert strong.abs().mean() < 0.4 and strong.min() < 0  # independent directions: no agreement
    # and so one linear rule labels the weak data of all agents, not the strong data
    for problem, expected in ((fedpd_logreg(non_iid="weak", clients=10), True),
                              (fedpd_logreg(non_iid="strong", clients=10), False)):
        a, b = problem.train.x, problem.train.y
        accuracy = ((a @ fit(a, b)).sign() == b).double().mean()
        assert (accuracy > 0.9) == expected, float(accuracy)


# --- FedProx's Synthetic(alpha, beta) --------------------------------------------------------


def test_synthetic_is_30_clients_60_features_10_classes_with_power_law_sizes():
    p = fedprox_synthetic()
    assert p.num_clients == p.test.num_clients == 30
    assert p.train.x.shape[1] == 60 and p.dim == 60 * 10 + 10
    assert p.train.y.dtype == torch.int64 and set(p.train.y.unique().tolist()) <= set(range(10))
    sizes = (p.train.sizes + p.test.sizes).sort().values
    assert sizes.min() >= 50 and sizes.max() <= 1000  # lognormal + 50, capped
    assert sizes.max() >= 5 * sizes.median()  # very unequal: a heavy tail, not near-equal shares
    uncapped = fedprox_synthetic(max_client_samples=10**6)
    total = uncapped.train.sizes + uncapped.test.sizes
    assert torch.equal(total.clamp(max=1000).sort().values, sizes) and total.max() > 1000


def test_synthetic_clients_differ_unless_iid():
    def feature_means(problem):
        return torch.stack([client(problem.train, i)[0].mean(0) for i in range(problem.num_clients)])

    iid, non_iid = fedprox_synthetic(iid=True), fedprox_synthetic(alpha=1.0, beta=1.0)
    assert feature_means(iid).abs().mean() < 0.2  # v = 0 for everybody
    assert feature_means(non_iid).std(0).mean() > 0.8  # v_k ~ N(B_k, 1): clients' means differ

    # iid: one (W, b) labels everybody, so the label mix is alike; non-iid clients are skewed
    def top_share(problem):
        return torch.stack([torch.bincount(client(problem.train, i)[1], minlength=10).max() / problem.train.sizes[i]
                            for i in range(problem.num_clients)]).mean()
    assert top_share(non_iid) > top_share(iid) + 0.2


# --- least squares ----------------------------------------------------------------------------


def test_least_squares_labels_follow_each_clients_own_truth():
    p = least_squares(clients=6, samples_per_client=50, test_samples_per_client=20, dim=5, noise=0.1)
    assert p.train.sizes.tolist() == [50] * 6 and p.test.sizes.tolist() == [20] * 6 and p.quadratic is not None
    truths = []
    for i in range(6):
        a, b = client(p.train, i)
        truths.append(fit(a, b))
        assert (a @ truths[-1] - b).pow(2).mean().sqrt() < 0.15  # b = A x_i* + 0.1 noise
    truths = torch.stack(truths)
    assert (truths - truths.mean(0)).norm(dim=1).min() > 0.3  # heterogeneity 1: x_i* differ
    same = least_squares(clients=6, heterogeneity=0.0)
    fits = torch.stack([fit(*client(same.train, i)) for i in range(6)])
    assert (fits - fits.mean(0)).norm(dim=1).max() < 0.1  # heterogeneity 0: one truth


# --- every problem: a test split per client, seeded ------------------------------------------

SMALL = {
    "fedpd_logreg": lambda **kw: fedpd_logreg(clients=8, samples_per_client=200, test_samples_per_client=100, **kw),
    "synthetic": lambda **kw: fedprox_synthetic(clients=8, max_client_samples=200, **kw),
    "least_squares": lambda **kw: least_squares(clients=8, test_samples_per_client=20, **kw),
}


def mismatch(name, train, test) -> float:
    """How badly one client's training data describe another's test data (0: same client)."""
    (xa, ya), (xb, yb) = train, test
    if name == "synthetic":  # clients differ in their feature means v_k
        return float((xa.mean(0) - xb.mean(0)).norm())
    w = fit(xa, ya)  # a linear fit to the training labels
    if name == "fedpd_logreg":
        return float(((xb @ w).sign() != yb).double().mean())  # test error rate
    return float((xb @ w - yb).pow(2).mean())  # least squares: test mse


@pytest.mark.parametrize("name", sorted(SMALL))
def test_each_client_has_a_test_split_from_its_own_distribution(name):
    p = SMALL[name]()
    assert p.train.num_clients == p.test.num_clients == 8 and (p.test.sizes > 0).all()
    if name == "synthetic":  # test_fraction 0.2 of each client's samples
        total = p.train.sizes + p.test.sizes
        assert ((p.test.sizes.double() - 0.2 * total).abs() <= 1).all()
    for i in range(8):  # client i's test data fit client i's training data best
        scores = [mismatch(name, client(p.train, j), client(p.test, i)) for j in range(8)]
        assert min(range(8), key=scores.__getitem__) == i, scores


@pytest.mark.parametrize("name", sorted(SMALL))
def test_same_seed_same_data_other_seed_other_data(name):
    a, b, c = SMALL[name](seed=3), SMALL[name](seed=3), SMALL[name](seed=4)
    for split in ("train", "test"):
        sa, sb, sc = getattr(a, split), getattr(b, split), getattr(c, split)
        assert torch.equal(sa.x, sb.x) and torch.equal(sa.y, sb.y) and torch.equal(sa.offsets, sb.offsets)
        assert sa.x.shape != sc.x.shape or not torch.equal(sa.x, sc.x)
