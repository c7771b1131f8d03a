"""The backdoor attack (Bagdasaryan et al. 2020; fedpd.attacks.Backdoor): the trigger stamped on
exactly the configured share of the attackers' samples, relabelled; model replacement's scaling
(and its norm constraint) exact; ``backdoor_acc`` by hand; and on MNIST the backdoor rises under
the plain mean and norm bounding lowers it."""

import os
from pathlib import Path

import pytest
import torch
from torch import nn

from fedpd.attacks import make_attack
from fedpd.errors import ConfigError
from fedpd.evaluation import evaluate_test
from fedpd.flat import FlatModel
from fedpd.problems import losses
from fedpd.problems.base import ClientSplit, Problem
from fedpd.problems.poisoning import apply_trigger, trigger_count

DT = torch.float64


def _problem(x, y, sizes, test_x=None, test_y=None, module=None):
    train = ClientSplit.from_parts(list(torch.split(x, sizes)), list(torch.split(y, sizes)))
    test = ClientSplit.from_parts([test_x if test_x is not None else x[:0]], [test_y if test_y is not None else y[:0]])
    module = module or nn.Sequential(nn.Flatten(), nn.Linear(x[0].numel(), 3))
    flat = FlatModel(module.to(DT))
    return Problem("tiny", train, test, flat, losses.cross_entropy, flat.initial(DT), classifies=True,
                   predict=losses.argmax_predict, info={"num_classes": 3})


def test_trigger_stamps_exactly_the_fraction_of_the_attackers_samples():
    g = torch.Generator().manual_seed(0)
    sizes = [5, 5, 4]
    x = torch.rand(14, 1, 4, 4, generator=g, dtype=DT)  # in [0, 1): the corner is never already 9
    y = torch.tensor([0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1])
    problem = _problem(x.clone(), y.clone(), sizes)
    att = make_attack("backdoor", parties=[1], target=2, poison_fraction=0.5, trigger_size=2, trigger_value=9.0)
    out = att.apply_data(problem)
    stamped = (out.train.x[:, 0, -2:, -2:] == 9.0).all(dim=(1, 2))
    # party 1 owns rows 5..9: round(0.5 · 5) = 3 of them (half up), nobody else
    assert trigger_count(0.5, 5) == 3 and int(stamped.sum()) == 3
    assert stamped[5:10].sum() == 3 and not stamped[:5].any() and not stamped[10:].any()
    assert (out.train.y[stamped] == 2).all()
    assert torch.equal(out.train.y[~stamped], y[~stamped])
    assert torch.equal(out.train.x[~stamped], x[~stamped])
    # only the 2x2 corner of a stamped image changed
    rest = torch.ones(4, 4, dtype=torch.bool)
    rest[-2:, -2:] = False
    assert torch.equal(out.train.x[stamped][:, 0][:, rest], x[stamped][:, 0][:, rest])
    assert out.info["backdoor"] == {"target": 2, "size": 2, "value": 9.0} and out.info["attacked_parties"] == [1]
    assert torch.equal(out.test.x, problem.test.x)  # the test split stays clean


def test_trigger_default_value_is_the_largest_input_and_vectors_get_their_last_features():
    x = torch.tensor([[0.0, 1.0, 2.0], [3.0, -1.0, 0.5], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]], dtype=DT)
    y = torch.tensor([0, 0, 1, 1])
    out = make_attack("backdoor", parties=[0], target=1, poison_fraction=1.0, trigger_size=1).apply_data(
        _problem(x.clone(), y, [2, 2]))
    assert out.info["backdoor"]["value"] == 3.0
    assert out.train.x[:2, 2].tolist() == [3.0, 3.0] and out.train.y.tolist() == [1, 1, 1, 1]
    assert torch.equal(out.train.x[:2, :2], x[:2, :2]) and torch.equal(out.train.x[2:], x[2:])
    assert apply_trigger(x, 2, 7.0)[:, 1:].eq(7.0).all()


@pytest.mark.parametrize("options, message", [({"target": 3}, "attack.target"),
                                              ({"trigger_size": 5}, "attack.trigger_size")])
def test_backdoor_data_errors_are_one_line(options, message):
    x = torch.zeros(4, 1, 4, 4, dtype=DT)
    with pytest.raises(ConfigError, match=message) as err:
        make_attack("backdoor", parties=[0], **options).apply_data(_problem(x, torch.tensor([0, 1, 2, 0]), [2, 2]))
    assert "\n" not in str(err.value)


def test_backdoor_bad_option_is_one_line():
    with pytest.raises(ConfigError, match="attack.poison_fraction") as err:
        make_attack("backdoor", poison_fraction=0.0)
    assert "\n" not in str(err.value)


def _uploads():
    g = torch.Generator().manual_seed(3)
    return {"x": torch.randn(4, 3, generator=g, dtype=DT)}, {"x0": torch.randn(3, generator=g, dtype=DT)}


@pytest.mark.parametrize("gamma, expected_gamma", [(5.0, 5.0), (None, 4.0)])  # default: n = 4 participants
def test_model_replacement_scaling_is_exact(gamma, expected_gamma):
    up, msg = _uploads()
    att = make_attack("backdoor", parties=[1, 3], gamma=gamma).bind(4)
    out, n = att.corrupt(up, msg, torch.arange(4), 0, 0, ("x",), ())
    assert n == 2
    r, u = msg["x0"], up["x"]
    for k in (1, 3):
        assert torch.equal(out["x"][k], r + expected_gamma * (u[k] - r))
    for k in (0, 2):
        assert torch.equal(out["x"][k], u[k])
    # model replacement: the mean of the round is X = u[1] when the honest updates cancel
    honest = {"x": torch.stack([r + 1, u[1], r - 1, r])}
    out, _ = make_attack("backdoor", parties=[1]).bind(4).corrupt(honest, msg, torch.arange(4), 0, 0, ("x",), ())
    torch.testing.assert_close(out["x"].mean(0), u[1], rtol=0, atol=1e-14)


def test_constrain_clips_the_scaled_update_to_max_norm():
    msg = {"x0": torch.tensor([1.0, 1.0], dtype=DT)}
    up = {"x": torch.tensor([[4.0, 5.0], [1.5, 1.0]], dtype=DT)}  # updates (3, 4) and (0.5, 0)
    att = make_attack("backdoor", parties=[0, 1], gamma=2.0, max_norm=5.0).bind(2)
    out, _ = att.corrupt(up, msg, torch.arange(2), 0, 0, ("x",), ())
    # (6, 8) has norm 10 → clipped to (3, 4); (1, 0) stays
    torch.testing.assert_close(out["x"], torch.tensor([[4.0, 5.0], [2.0, 1.0]], dtype=DT), rtol=0, atol=1e-15)


def test_backdoor_acc_by_hand():
    # logits: class 0 = 12, class 1 = x0 + x2, class 2 = −100; the trigger sets x2 = 10, so a
    # stamped input is classified 1 (the target) iff x0 > 2
    lin = nn.Linear(3, 3).to(DT)
    with torch.no_grad():
        lin.weight.copy_(torch.tensor([[0, 0, 0], [1, 0, 1], [0, 0, 0]], dtype=DT))
        lin.bias.copy_(torch.tensor([12, 0, -100], dtype=DT))
    tx = torch.tensor([[3, 0, 0], [1, 0, 0], [5, 0, 0], [2.5, 9, 0], [0, 0, 0]], dtype=DT)
    ty = torch.tensor([0, 0, 1, 2, 2])
    problem = _problem(tx, ty, [5], tx, ty, module=lin)
    x = problem.x_init
    base = evaluate_test(problem, x)
    assert "backdoor_acc" not in base  # only with the backdoor attack configured
    problem.info["backdoor"] = {"target": 1, "size": 1, "value": 10.0}
    out = evaluate_test(problem, x)
    # eligible (label != 1): rows 0, 1, 3, 4; stamped x0 > 2: rows 0 and 3 → 2/4
    assert out["backdoor_acc"] == 0.5
    assert out["test_acc"] == base["test_acc"] == 2 / 5  # clean predictions: 0, 0, 1, 0, 0
    assert evaluate_test(problem, x, batch=2)["backdoor_acc"] == 0.5  # by chunks alike


DATA = os.environ.get("FEDPD_DATA")


@pytest.mark.skipif(not DATA or not (Path(DATA) / "mnist").exists(), reason="needs MNIST under FEDPD_DATA")
def test_mnist_backdoor_rises_under_the_mean_and_norm_bounding_lowers_it():
    from fedpd.config import load_config
    from fedpd.simulation import Simulation

    def run(aggregator, options):
        cfg = {"problem": {"name": "dataset", "dataset": "mnist", "clients": 10, "max_samples": 2000,
                           "max_test_samples": 500},
               "algorithm": {"name": "fedavg", "aggregator": aggregator, "aggregator_options": options},
               "solver": {"name": "sgd", "lr": 0.1, "local_steps": 10, "batch_size": 20},
               "sampler": {"name": "all"},
               "attack": {"name": "backdoor", "parties": [0], "target": 0, "poison_fraction": 0.5,
                          "trigger_size": 4},
               "run": {"rounds": 6, "dtype": "float32"}}
        sim = Simulation(load_config(cfg))
        for _ in range(6):
            sim.step()
        return sim.metrics()

    attacked = run("mean", {})
    defended = run("norm_bounding", {"max_norm": 0.5})
    assert attacked["backdoor_acc"] > 0.5, attacked
    assert defended["backdoor_acc"] < attacked["backdoor_acc"] / 2, (attacked, defended)
    assert defended["test_acc"] > 0.7, defended
