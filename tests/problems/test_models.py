"""Models: shapes, one SGD step, vmap over parameter sets, the hand-written LSTM, the registry."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap

from fedpd.errors import ConfigError
from fedpd.models import (
    MLP,
    MODELS,
    CharLSTM,
    FemnistCNN,
    LeNet,
    LogisticRegression,
    LSTMLayer,
    ResNet18GN,
    SentimentLSTM,
    StackedLSTM,
    build_model,
)

# name -> (input_shape, num_classes, options, batch); default architectures, tiny batches and
# short sequences so the whole file stays fast on CPU.
CASES = {
    "logistic": ((20,), 3, {}, 8),
    "mlp": ((784,), 10, {}, 8),
    "lenet": ((3, 32, 32), 10, {}, 4),
    "femnist_cnn": ((1, 28, 28), 62, {}, 4),
    "resnet18_gn": ((3, 32, 32), 10, {}, 2),
    "char_lstm": ((6,), 80, {}, 2),
    "sentiment_lstm": ((6,), 2, {"vocab_size": 50}, 2),
}
VOCAB = {"char_lstm": 80, "sentiment_lstm": 50}


def make(name: str, batch: int | None = None, seed: int = 0, sample_shape: tuple | None = None):
    """A seeded model of CASES[name] with a fixed input batch (of ``sample_shape`` samples if
    given: the CNNs take any image size) and class targets."""
    shape, classes, options, default_batch = CASES[name]
    batch = batch or default_batch
    torch.manual_seed(seed)
    model = build_model(name, input_shape=shape, num_classes=classes, **options)
    shape = sample_shape or shape
    g = torch.Generator().manual_seed(seed + 1)
    if name in VOCAB:
        x = torch.randint(0, VOCAB[name], (batch, *shape), generator=g)
    else:
        x = torch.randn(batch, *shape, generator=g)
    y = torch.randint(0, classes, (batch,), generator=g)
    return model, x, y


def params_of(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def perturbed(params: dict[str, torch.Tensor], scale: float = 0.05, seed: int = 7) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: v + scale * torch.randn(v.shape, generator=g) for k, v in params.items()}


def stack(*dicts: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: torch.stack([d[k] for d in dicts]) for k in dicts[0]}


@pytest.mark.parametrize("name", sorted(CASES))
def test_output_shape(name):
    model, x, _ = make(name)
    out = model(x)
    assert out.shape == (x.shape[0], CASES[name][1])
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_sgd_step_lowers_loss(name):
    model, x, y = make(name)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    with torch.no_grad():
        after = F.cross_entropy(model(x), y)
    assert after.item() < loss.item()


@pytest.mark.parametrize("name", sorted(CASES))
def test_vmap_over_parameter_sets_matches_separate_calls(name):
    # ResNet-18 on CPU is the slow one: one 16×16 sample per parameter set (global pooling
    # makes the architecture independent of the image size).
    model, x, y = make(name, batch=1, sample_shape=(3, 16, 16)) if name == "resnet18_gn" else make(name, batch=2)
    p0 = params_of(model)
    p1 = perturbed(p0)
    xs = torch.stack([x, x.flip(0)])  # a different batch per parameter set
    ys = torch.stack([y, y.flip(0)])

    def forward(p, xb):
        return functional_call(model, p, (xb,))

    def loss(p, xb, yb):
        return F.cross_entropy(forward(p, xb), yb)

    out = vmap(forward)(stack(p0, p1), xs)
    grads = vmap(grad(loss))(stack(p0, p1), xs, ys)
    for k, p in enumerate((p0, p1)):
        torch.testing.assert_close(out[k], forward(p, xs[k]), atol=1e-5, rtol=1e-5)
    single = grad(loss)(p1, xs[1], ys[1])  # the perturbed set, second slot: no mixing across slots
    for key in p1:
        torch.testing.assert_close(grads[key][1], single[key], atol=1e-5, rtol=1e-4)
    assert not torch.allclose(out[0], forward(p1, xs[0]))  # the perturbation mattered


@pytest.mark.parametrize("name", ["mlp", "lenet", "char_lstm", "sentiment_lstm"])
def test_vmap_over_flat_vectors_in_float64(name):
    """The simulator's path: unflatten a [K, d] float64 matrix, vmap over clients."""
    model, x, _ = make(name, batch=2)
    names = [k for k, _ in model.named_parameters()]
    shapes = [p.shape for _, p in model.named_parameters()]
    flat0 = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).double()
    flat = torch.stack([flat0, flat0 + 0.01 * torch.randn(flat0.shape, dtype=torch.float64)])
    xd = x if name in VOCAB else x.double()

    def forward(v):
        parts = torch.split(v, [math.prod(s) for s in shapes])
        return functional_call(model, {n: t.view(s) for n, t, s in zip(names, parts, shapes)}, (xd,))

    out = vmap(forward)(flat)
    assert out.dtype == torch.float64 and out.shape == (2, 2, CASES[name][1])
    torch.testing.assert_close(out[1], forward(flat[1]))


@pytest.mark.parametrize("name", sorted(CASES))
def test_initialisation_is_deterministic_under_manual_seed(name):
    a, _, _ = make(name, seed=3)
    b, _, _ = make(name, seed=3)
    c, _, _ = make(name, seed=4)
    pa, pb, pc = params_of(a), params_of(b), params_of(c)
    assert all(torch.equal(pa[k], pb[k]) for k in pa)
    assert any(not torch.equal(pa[k], pc[k]) for k in pa)
    assert not list(a.buffers())


def test_no_batchnorm_or_fused_lstm_anywhere():
    for name in CASES:
        model, _, _ = make(name)
        for m in model.modules():
            assert not isinstance(m, (nn.modules.batchnorm._BatchNorm, nn.LSTM, nn.RNNBase))


def _copy_lstm_weights(ours: StackedLSTM, ref: nn.LSTM) -> None:
    with torch.no_grad():
        for i, layer in enumerate(ours.layers):
            layer.ih.weight.copy_(getattr(ref, f"weight_ih_l{i}"))
            layer.ih.bias.copy_(getattr(ref, f"bias_ih_l{i}"))
            layer.hh.weight.copy_(getattr(ref, f"weight_hh_l{i}"))
            layer.hh.bias.copy_(getattr(ref, f"bias_hh_l{i}"))


def test_lstm_layer_matches_torch_lstm():
    torch.manual_seed(0)
    ref = nn.LSTM(5, 7, num_layers=1, batch_first=True)
    ours = StackedLSTM(5, 7, layers=1)
    _copy_lstm_weights(ours, ref)
    x = torch.randn(3, 9, 5)
    expected, (h_n, c_n) = ref(x)
    outputs, (h, c) = ours.layers[0](x)
    torch.testing.assert_close(outputs, expected, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(h, h_n[0], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(c, c_n[0], atol=1e-6, rtol=1e-5)


def test_stacked_lstm_matches_torch_lstm_two_layers():
    torch.manual_seed(1)
    ref = nn.LSTM(4, 6, num_layers=2, batch_first=True)
    ours = StackedLSTM(4, 6, layers=2)
    _copy_lstm_weights(ours, ref)
    x = torch.randn(2, 5, 4)
    torch.testing.assert_close(ours(x), ref(x)[0], atol=1e-6, rtol=1e-5)


def test_lstm_layer_initialisation_law_matches_torch():
    layer = LSTMLayer(3, 16)
    bound = 1 / math.sqrt(16)
    for p in layer.parameters():
        assert p.abs().max() <= bound
    assert layer.ih.weight.shape == (64, 3) and layer.hh.weight.shape == (64, 16)


def test_logistic_binary_single_logit():
    torch.manual_seed(0)
    model = build_model("logistic", input_shape=(5,), num_classes=1)
    assert isinstance(model, LogisticRegression)
    x = torch.randn(4, 5)
    assert model(x).shape == (4, 1)
    assert model(x[0]).shape == (1, 1)


def test_mlp_hidden_option_and_flattening():
    torch.manual_seed(0)
    model = build_model("mlp", input_shape=(1, 28, 28), num_classes=10, hidden=[32])
    assert isinstance(model, MLP) and len(model.layers) == 2
    assert model(torch.randn(3, 1, 28, 28)).shape == (3, 10)


def test_lenet_on_28x28_grey_and_flat_size():
    torch.manual_seed(0)
    model = build_model("lenet", input_shape=(1, 28, 28), num_classes=10)
    assert isinstance(model, LeNet)
    assert model.fc1.in_features == 64 * 4 * 4
    assert model(torch.randn(2, 1, 28, 28)).shape == (2, 10)
    assert LeNet().fc1.in_features == 64 * 5 * 5


def test_femnist_cnn_accepts_flat_input():
    torch.manual_seed(0)
    model = build_model("femnist_cnn", input_shape=(784,), num_classes=62)
    assert isinstance(model, FemnistCNN)
    x = torch.randn(2, 1, 28, 28)
    torch.testing.assert_close(model(x.reshape(2, 784)), model(x))


def test_resnet_uses_groupnorm_with_requested_groups():
    torch.manual_seed(0)
    model = build_model("resnet18_gn", input_shape=(3, 32, 32), num_classes=10, groups=4)
    assert isinstance(model, ResNet18GN)
    norms = [m for m in model.modules() if isinstance(m, nn.GroupNorm)]
    assert norms and all(m.num_groups == 4 for m in norms)
    assert len(model.blocks) == 8


def test_char_lstm_defaults_follow_leaf():
    model = CharLSTM()
    assert model.embedding.weight.shape == (80, 8)
    assert len(model.lstm.layers) == 2 and model.lstm.layers[0].hidden_size == 256
    assert sum(p.numel() for p in model.parameters()) == 819_920


def test_model_options_lists_what_build_model_accepts():
    from fedpd.models import model_options

    assert model_options("char_lstm") == ["vocab_size", "embed_dim", "hidden", "layers"]
    assert "embedding_weights" in model_options("sentiment_lstm") and model_options("logistic") == []
    # the dataset problem passes the loader's vocabulary size: 81 ids for Shakespeare (80 characters + other)
    model = build_model("char_lstm", input_shape=(5,), num_classes=81, vocab_size=81, hidden=4)
    assert model(torch.tensor([[80, 0, 1, 2, 79]])).shape == (1, 81)


def test_sentiment_lstm_pretrained_embedding_frozen_and_trainable():
    glove = torch.randn(30, 12)
    frozen = build_model("sentiment_lstm", input_shape=(5,), num_classes=2, embedding_weights=glove)
    assert "embedding_weight" not in dict(frozen.named_parameters())
    torch.testing.assert_close(frozen.embedding_weight, glove)
    assert frozen.lstm.layers[0].ih.in_features == 12
    x = torch.randint(0, 30, (2, 5))
    assert frozen(x).shape == (2, 2)
    # functional_call with parameters only uses the buffer, under vmap too
    p = params_of(frozen)
    out = vmap(lambda q: functional_call(frozen, q, (x,)))(stack(p, perturbed(p)))
    torch.testing.assert_close(out[0], frozen(x), atol=1e-5, rtol=1e-5)
    p64 = {k: v.double() for k, v in p.items()}  # float64 parameters, float32 frozen matrix
    torch.testing.assert_close(functional_call(frozen, p64, (x,)), frozen(x).double(), atol=1e-5, rtol=1e-5)

    trainable = SentimentLSTM(embedding_weights=glove.numpy(), freeze_embedding=False)
    torch.testing.assert_close(trainable.embedding.weight.detach(), glove)
    assert trainable.embedding.weight.requires_grad


def test_registry_entries_have_one_line_descriptions():
    assert set(MODELS) == set(CASES)
    for name, (factory, description) in MODELS.items():
        assert callable(factory) and name == name.lower()
        assert description and "\n" not in description


def _config_error(match: str, name: str, **kwargs) -> str:
    with pytest.raises(ConfigError, match=match) as info:
        build_model(name, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_unknown_model_name():
    message = _config_error("unknown model 'resnet'", "resnet", input_shape=(3, 32, 32), num_classes=10)
    assert "resnet18_gn" in message and "femnist_cnn" in message


def test_unknown_option_names_model_option_and_allowed():
    message = _config_error("unknown option 'hiden'", "mlp", input_shape=(10,), num_classes=2, hiden=(5,))
    assert "'mlp'" in message and "hidden" in message
    message = _config_error("unknown option 'groups'", "lenet", input_shape=(3, 32, 32), num_classes=10, groups=2)
    assert "'lenet'" in message


@pytest.mark.parametrize(
    ("name", "shape", "options", "match"),
    [
        ("mlp", (10,), {"hidden": (5, -1)}, "hidden"),
        ("mlp", (10,), {"hidden": "wide"}, "hidden"),
        ("resnet18_gn", (3, 32, 32), {"groups": 3}, "groups"),
        ("resnet18_gn", (3, 32, 32), {"groups": True}, "groups"),
        ("char_lstm", (8,), {"hidden": 0}, "hidden"),
        ("char_lstm", (8,), {"layers": 1.5}, "layers"),
        ("sentiment_lstm", (8,), {}, "vocab_size"),
        ("sentiment_lstm", (8,), {"vocab_size": 30, "embedding_weights": torch.zeros(20, 4)}, "vocab_size"),
        ("sentiment_lstm", (8,), {"vocab_size": 30, "freeze_embedding": "yes"}, "freeze_embedding"),
    ],
)
def test_invalid_option_values(name, shape, options, match):
    num_classes = 80 if name == "char_lstm" else 2
    message = _config_error(match, name, input_shape=shape, num_classes=num_classes, **options)
    assert f"'{name}'" in message


@pytest.mark.parametrize(
    ("name", "shape", "num_classes", "match"),
    [
        ("lenet", (784,), 10, "input_shape"),
        ("lenet", (1, 8, 8), 10, "input_shape"),
        ("femnist_cnn", (3, 32, 32), 62, "input_shape"),
        ("char_lstm", (3, 32, 32), 80, "input_shape"),
        ("mlp", (0,), 10, "input_shape"),
        ("mlp", (10,), 0, "num_classes"),
    ],
)
def test_invalid_shapes_and_classes(name, shape, num_classes, match):
    _config_error(match, name, input_shape=shape, num_classes=num_classes)
