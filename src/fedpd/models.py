"""Models of the papers' experiments, written for ``torch.func``.

fedpd evaluates a module at flat parameter vectors with ``torch.func.functional_call`` and
vectorises over clients with ``torch.func.vmap``, so every model here is a plain
``nn.Module`` whose forward is a pure function of (parameters, input): GroupNorm instead of
BatchNorm, no running statistics, no in-place ops, no branching on tensor values, and an LSTM
recurrence written out from ``nn.Linear`` layers (``nn.LSTM``'s fused weights do not vmap).
Initialisation draws only from torch's global generator, so ``torch.manual_seed`` fixes it.

    >>> model = build_model("femnist_cnn", input_shape=(1, 28, 28), num_classes=62)
"""

from __future__ import annotations

import inspect
import math
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from fedpd import names
from fedpd.errors import ConfigError, reason
from fedpd.options import NoOptions

__all__ = [
    "LogisticRegression",
    "MLP",
    "LeNet",
    "FemnistCNN",
    "ResNet18GN",
    "LSTMLayer",
    "StackedLSTM",
    "CharLSTM",
    "SentimentLSTM",
    "MODELS",
    "model_options",
    "model_factory",
    "check_model_options",
    "check_outputs",
    "build_model",
]


# --- validation ----------------------------------------------------------------------------
def _short(value) -> str:
    """repr on one line, at most 60 characters (messages are one line)."""
    text = " ".join(repr(value).split())
    return text if len(text) <= 60 else text[:57] + "..."


def _int(name: str, value, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {_short(value)}")
    return value


def _ints(name: str, value, minimum: int = 1) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
        raise ConfigError(f"{name} must be a list of integers >= {minimum}, got {_short(value)}")
    for v in value:
        if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
            raise ConfigError(f"{name} must be a list of integers >= {minimum}, got {_short(value)}")
    return tuple(value)


def _flatten_input(x: Tensor, in_features: int) -> Tensor:
    """[B, ...] -> [B, in_features]; a single unbatched sample becomes a batch of one."""
    return x.reshape(-1, in_features)


# --- linear and MLP ------------------------------------------------------------------------
class LogisticRegression(nn.Module):
    """Multinomial logistic regression: one Linear on the flattened input.

    ``num_classes=1`` gives a single logit (binary, e.g. FedPD §5's ±1 labels); the output is
    then ``[B, 1]``. Used for MNIST / FedProx Synthetic(α, β) convex baselines.
    """

    def __init__(self, in_features: int, num_classes: int):
        super().__init__()
        self.in_features = _int("in_features", in_features)
        self.linear = nn.Linear(self.in_features, _int("num_classes", num_classes))

    def forward(self, x: Tensor) -> Tensor:
        return self.linear(_flatten_input(x, self.in_features))


class MLP(nn.Module):
    """Fully connected ReLU network on the flattened input (FedAvg's MNIST "2NN": 200-200)."""

    def __init__(self, in_features: int, hidden: Sequence[int] = (200, 200), num_classes: int = 10):
        super().__init__()
        self.in_features = _int("in_features", in_features)
        widths = (self.in_features, *_ints("hidden", hidden), _int("num_classes", num_classes))
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))

    def forward(self, x: Tensor) -> Tensor:
        h = _flatten_input(x, self.in_features)
        *hidden, last = self.layers  # (slicing a ModuleList builds a new one every call)
        for layer in hidden:
            h = F.relu(layer(h))
        return last(h)


# --- CNNs ----------------------------------------------------------------------------------
class LeNet(nn.Module):
    """The A-FedPD simulator's LeNet (CIFAR-10/100; also 28×28 grey images).

    conv5×5-64 → ReLU → maxpool 2 → conv5×5-64 → ReLU → maxpool 2 → FC 384 → ReLU → FC 192 →
    ReLU → FC num_classes; no padding, so the flattened size is 64·s² with
    s = ((image_size − 4) // 2 − 4) // 2 (5 for 32×32, 4 for 28×28).
    """

    def __init__(self, in_channels: int = 3, num_classes: int = 10, image_size: int | tuple[int, int] = 32):
        super().__init__()
        sizes = (
            (image_size, image_size) if isinstance(image_size, int) and not isinstance(image_size, bool) else image_size
        )
        sizes = _ints("image_size", sizes)
        if len(sizes) != 2:
            raise ConfigError(f"image_size must be an integer or (height, width), got {_short(image_size)}")
        out = [((s - 4) // 2 - 4) // 2 for s in sizes]
        if min(out) < 1:
            raise ConfigError(
                f"image_size must be at least 16 for LeNet's two 5×5 convs and pools, got {_short(image_size)}"
            )
        self.conv1 = nn.Conv2d(_int("in_channels", in_channels), 64, 5)
        self.conv2 = nn.Conv2d(64, 64, 5)
        self.fc1 = nn.Linear(64 * out[0] * out[1], 384)
        self.fc2 = nn.Linear(384, 192)
        self.fc3 = nn.Linear(192, _int("num_classes", num_classes))

    def forward(self, x: Tensor) -> Tensor:
        h = F.max_pool2d(F.relu(self.conv1(x)), 2)
        h = F.max_pool2d(F.relu(self.conv2(h)), 2)
        h = F.relu(self.fc1(h.flatten(1)))
        h = F.relu(self.fc2(h))
        return self.fc3(h)


class FemnistCNN(nn.Module):
    """FedPD's FEMNIST CNN (as LEAF's): input 1×28×28, or flat 784 (reshaped).

    conv5×5-32 (pad 2) → ReLU → maxpool 2 → conv5×5-64 (pad 2) → ReLU → maxpool 2 →
    FC 2048 → ReLU → FC num_classes.
    """

    def __init__(self, num_classes: int = 62):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 5, padding=2)
        self.conv2 = nn.Conv2d(32, 64, 5, padding=2)
        self.fc1 = nn.Linear(64 * 7 * 7, 2048)
        self.fc2 = nn.Linear(2048, _int("num_classes", num_classes))

    def forward(self, x: Tensor) -> Tensor:
        x = x.reshape(-1, 1, 28, 28)  # [B, 784], [B, 28, 28] and [B, 1, 28, 28] alike
        h = F.max_pool2d(F.relu(self.conv1(x)), 2)
        h = F.max_pool2d(F.relu(self.conv2(h)), 2)
        return self.fc2(F.relu(self.fc1(h.flatten(1))))


class _BasicBlock(nn.Module):
    """ResNet basic block: two 3×3 convs with GroupNorm; 1×1 conv + GroupNorm shortcut when the
    shape changes."""

    def __init__(self, c_in: int, c_out: int, stride: int, groups: int):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride=stride, padding=1, bias=False)
        self.norm1 = nn.GroupNorm(groups, c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, padding=1, bias=False)
        self.norm2 = nn.GroupNorm(groups, c_out)
        self.shortcut = None
        if stride != 1 or c_in != c_out:
            self.shortcut = nn.Sequential(
                nn.Conv2d(c_in, c_out, 1, stride=stride, bias=False), nn.GroupNorm(groups, c_out)
            )

    def forward(self, x: Tensor) -> Tensor:
        h = F.relu(self.norm1(self.conv1(x)))
        h = self.norm2(self.conv2(h))
        skip = x if self.shortcut is None else self.shortcut(x)
        return F.relu(h + skip)


class ResNet18GN(nn.Module):
    """ResNet-18 for 32×32 images with GroupNorm instead of BatchNorm (Hsieh et al. 2020,
    "The Non-IID Data Quagmire"; the usual CIFAR variant: 3×3 conv stem, no max-pool, four
    stages of two basic blocks with 64/128/256/512 channels, global average pool, FC).

    ``groups`` GroupNorm groups per layer (2, as in Hsieh et al.); must divide 64.
    """

    def __init__(self, num_classes: int = 10, in_channels: int = 3, groups: int = 2):
        super().__init__()
        groups = _int("groups", groups)
        if 64 % groups:
            raise ConfigError(f"groups must divide 64 (the narrowest layer's channels), got {groups}")
        self.conv1 = nn.Conv2d(_int("in_channels", in_channels), 64, 3, padding=1, bias=False)
        self.norm1 = nn.GroupNorm(groups, 64)
        blocks, c_in = [], 64
        for c_out, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            blocks += [_BasicBlock(c_in, c_out, stride, groups), _BasicBlock(c_out, c_out, 1, groups)]
            c_in = c_out
        self.blocks = nn.Sequential(*blocks)
        self.fc = nn.Linear(512, _int("num_classes", num_classes))

    def forward(self, x: Tensor) -> Tensor:
        h = F.relu(self.norm1(self.conv1(x)))
        h = self.blocks(h)
        return self.fc(h.mean(dim=(-2, -1)))


# --- LSTMs ---------------------------------------------------------------------------------
class LSTMLayer(nn.Module):
    """One LSTM layer, batch first, as ``nn.LSTM`` computes it but from two ``nn.Linear``s
    (``ih``: input→4H, ``hh``: hidden→4H, gates in ``nn.LSTM``'s order i, f, g, o), so that it
    works under ``torch.func.vmap``. Same initialisation law as ``nn.LSTM``: U(−1/√H, 1/√H).
    The state starts at zero.
    """

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        self.hidden_size = _int("hidden", hidden_size)
        self.ih = nn.Linear(_int("input_size", input_size), 4 * hidden_size)
        self.hh = nn.Linear(hidden_size, 4 * hidden_size)
        bound = 1.0 / math.sqrt(hidden_size)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def forward(self, x: Tensor) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """x [B, T, I] -> (outputs [B, T, H], (h_T, c_T) each [B, H])."""
        gates_x = self.ih(x)  # all time steps at once
        outputs = []
        h = c = None
        for t in range(x.shape[1]):
            if h is None:  # zero state: hh(0) is its bias, f·c_0 vanishes
                i, f, g, o = (gates_x[:, t] + self.hh.bias).chunk(4, dim=-1)
                c = torch.sigmoid(i) * torch.tanh(g)
            else:
                i, f, g, o = (gates_x[:, t] + self.hh(h)).chunk(4, dim=-1)
                c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            outputs.append(h)
        return torch.stack(outputs, dim=1), (h, c)


class StackedLSTM(nn.Module):
    """``layers`` :class:`LSTMLayer`s, each fed the previous one's outputs (``nn.LSTM`` with
    ``batch_first=True``, no dropout). Returns the last layer's outputs [B, T, H]."""

    def __init__(self, input_size: int, hidden_size: int, layers: int = 1):
        super().__init__()
        sizes = [input_size] + [hidden_size] * (_int("layers", layers) - 1)
        self.layers = nn.ModuleList(LSTMLayer(s, hidden_size) for s in sizes)

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x, _ = layer(x)
        return x


class CharLSTM(nn.Module):
    """LEAF's Shakespeare next-character model (used by FedPD / FedAvg / FedProx): embedding 8
    → 2-layer LSTM 256 → FC to the vocabulary. Input int64 [B, T] with ids < ``vocab_size``
    (fedpd's Shakespeare loader uses 81: LEAF's 80 characters + one for any other; the
    ``dataset`` problem passes it); logits of the last step."""

    def __init__(
        self, vocab_size: int = 80, embed_dim: int = 8, hidden: int = 256, layers: int = 2, num_classes: int = 80
    ):
        super().__init__()
        self.embedding = nn.Embedding(_int("vocab_size", vocab_size), _int("embed_dim", embed_dim))
        self.lstm = StackedLSTM(embed_dim, _int("hidden", hidden), layers)
        self.fc = nn.Linear(hidden, _int("num_classes", num_classes))

    def forward(self, x: Tensor) -> Tensor:
        return self.fc(self.lstm(self.embedding(x))[:, -1])


class SentimentLSTM(nn.Module):
    """LEAF's Sent140 sentiment LSTM: word embedding → LSTM → FC on the last step.

    Input int64 token ids [B, T]; pad sequences at the front so the last step is a real word.
    The embedding is trained from scratch (``embed_dim``, default 100) unless
    ``embedding_weights`` [vocab_size, E] (e.g. GloVe) is given: then E is the embedding size
    and, with ``freeze_embedding`` (default, as in LEAF), the matrix is a buffer, not a
    parameter, so it stays out of the flat vector and is shared by all clients.
    """

    def __init__(
        self,
        vocab_size: int | None = None,
        embed_dim: int | None = None,
        hidden: int = 100,
        layers: int = 1,
        num_classes: int = 2,
        embedding_weights=None,
        freeze_embedding: bool = True,
    ):
        super().__init__()
        if not isinstance(freeze_embedding, bool):
            raise ConfigError(f"freeze_embedding must be true or false, got {_short(freeze_embedding)}")
        self.embedding = None
        if embedding_weights is None:
            if vocab_size is None:
                raise ConfigError("vocab_size is required when no embedding_weights are given")
            embed_dim = 100 if embed_dim is None else embed_dim
            self.embedding = nn.Embedding(_int("vocab_size", vocab_size), _int("embed_dim", embed_dim))
        else:
            try:
                weights = torch.as_tensor(embedding_weights, dtype=torch.get_default_dtype()).detach().clone()
            except (TypeError, ValueError, RuntimeError) as e:
                raise ConfigError(
                    f"embedding_weights must be a [vocab_size, dim] matrix: {' '.join(str(e).split())}"
                ) from None
            if weights.dim() != 2 or min(weights.shape) < 1:
                raise ConfigError(
                    f"embedding_weights must be a [vocab_size, dim] matrix, got shape {tuple(weights.shape)}"
                )
            if vocab_size is not None and _int("vocab_size", vocab_size) != weights.shape[0]:
                raise ConfigError(f"vocab_size {vocab_size} does not match embedding_weights' {weights.shape[0]} rows")
            if embed_dim is not None and _int("embed_dim", embed_dim) != weights.shape[1]:
                raise ConfigError(f"embed_dim {embed_dim} does not match embedding_weights' {weights.shape[1]} columns")
            vocab_size, embed_dim = weights.shape
            if freeze_embedding:
                self.register_buffer("embedding_weight", weights)
            else:
                self.embedding = nn.Embedding.from_pretrained(weights, freeze=False)
        self.lstm = StackedLSTM(embed_dim, _int("hidden", hidden), layers)
        self.fc = nn.Linear(hidden, _int("num_classes", num_classes))

    def forward(self, x: Tensor) -> Tensor:
        if self.embedding is not None:
            e = self.embedding(x)
        else:  # the frozen matrix follows the parameters' dtype (float64 flat vectors)
            e = F.embedding(x, self.embedding_weight).to(self.fc.weight.dtype)
        return self.fc(self.lstm(e)[:, -1])


# --- registry ------------------------------------------------------------------------------
def _features(input_shape: tuple[int, ...]) -> int:
    return math.prod(input_shape)


def _image(input_shape: tuple[int, ...]) -> tuple[int, int, int]:
    if len(input_shape) != 3:
        raise ConfigError(f"input_shape must be (channels, height, width), got {input_shape}")
    return input_shape


def _sequence(input_shape: tuple[int, ...]) -> int:
    if len(input_shape) != 1:
        raise ConfigError(f"input_shape must be (sequence_length,), got {input_shape}")
    return input_shape[0]


def _logistic(input_shape, num_classes):
    return LogisticRegression(_features(input_shape), num_classes)


def _mlp(input_shape, num_classes, *, hidden=(200, 200)):
    return MLP(_features(input_shape), hidden, num_classes)


def _lenet(input_shape, num_classes):
    c, h, w = _image(input_shape)
    if min(h, w) < 16:
        raise ConfigError(f"input_shape {input_shape} is too small: LeNet needs height and width >= 16")
    return LeNet(c, num_classes, (h, w))


def _femnist_cnn(input_shape, num_classes):
    if input_shape not in ((784,), (28, 28), (1, 28, 28)):
        raise ConfigError(f"input_shape must be (1, 28, 28), (28, 28) or (784,), got {input_shape}")
    return FemnistCNN(num_classes)


def _resnet18_gn(input_shape, num_classes, *, groups=2):
    c, _, _ = _image(input_shape)
    return ResNet18GN(num_classes, c, groups)


def _char_lstm(input_shape, num_classes, *, vocab_size=80, embed_dim=8, hidden=256, layers=2):
    _sequence(input_shape)
    return CharLSTM(vocab_size, embed_dim, hidden, layers, num_classes)


def _sentiment_lstm(
    input_shape,
    num_classes,
    *,
    vocab_size=None,
    embed_dim=None,
    hidden=100,
    layers=1,
    embedding_weights=None,
    freeze_embedding=True,
):
    _sequence(input_shape)
    return SentimentLSTM(vocab_size, embed_dim, hidden, layers, num_classes, embedding_weights, freeze_embedding)


MODELS: dict[str, tuple[Callable[..., nn.Module], str]] = {
    "logistic": (_logistic, "multinomial logistic regression (one Linear; num_classes=1: one binary logit)"),
    "mlp": (_mlp, "fully connected ReLU network, hidden widths (200, 200) by default"),
    "lenet": (_lenet, "A-FedPD simulator's LeNet: 2× conv5×5-64 + maxpool, FC 384-192 (CIFAR, 28×28 grey)"),
    "femnist_cnn": (_femnist_cnn, "FedPD's FEMNIST CNN: conv5×5-32, conv5×5-64, FC 2048 (1×28×28)"),
    "resnet18_gn": (_resnet18_gn, "ResNet-18 for 32×32 images with GroupNorm (Hsieh et al. 2020)"),
    "char_lstm": (_char_lstm, "LEAF Shakespeare next-char LSTM: embed 8, 2×LSTM 256, logits of the last step"),
    "sentiment_lstm": (_sentiment_lstm, "LEAF Sent140 LSTM: word embedding (optionally GloVe), LSTM 100, last step"),
}


def _options(factory: Callable) -> list[str]:
    """The option names of a model factory: its parameters after (input_shape, num_classes)."""
    return [p.name for p in _parameters(factory)[2:] if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def _parameters(factory: Callable) -> list[inspect.Parameter]:
    try:
        return list(inspect.signature(factory).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: take it as (*args, **kwargs)
        return [inspect.Parameter("args", inspect.Parameter.VAR_POSITIONAL),
                inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD)]


def signature_problem(factory: Callable, name: str) -> str | None:
    """Why ``factory`` cannot be a model factory, from its signature alone (None: it can): the
    one rule ``fedpd run`` and ``fedpd show model`` / ``fedpd list`` apply."""
    params = _parameters(factory)
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < 2 and not any(p.kind is p.VAR_POSITIONAL for p in params):
        return (f"{name} takes ({', '.join(p.name for p in params)}); a model factory takes "
                f"(input_shape, num_classes, **options)")
    return None


#: what ``model.name`` names (:func:`fedpd.names.resolve`); a factory's options are its signature's
KIND = names.Kind("model", {name: names.Entry(name, factory, NoOptions, description)
                            for name, (factory, description) in MODELS.items()},
                  plugin="a model factory takes (input_shape, num_classes, **options) and returns a torch.nn.Module",
                  check=signature_problem, options=False, args=None)


def check_model_options(factory: Callable, name: str, options: dict) -> None:
    """``factory`` takes (input_shape, num_classes, **options) and these ``options``: ConfigError
    naming the key (``model.KEY``) and what is allowed otherwise."""
    params = _parameters(factory)
    wrong = signature_problem(factory, name)
    if wrong:
        raise ConfigError(f"model.name: {wrong}")
    accepted = _options(factory)
    if not any(p.kind is p.VAR_KEYWORD for p in params):
        for key in options:
            if key not in accepted:
                raise ConfigError(f"model.{key}: unknown option {key!r} of model {name!r} (allowed: "
                                  f"{', '.join(['name', *accepted])})")
    for p in params[2:]:
        if p.default is p.empty and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in options:
            raise ConfigError(f"model.{p.name}: missing (model {name!r} requires it)")


def model_options(name: str | Callable) -> list[str]:
    """The options ``build_model(name, ...)`` accepts (a name of :data:`MODELS`, or a factory)."""
    return _options(name if callable(name) else MODELS[name][0])


def model_factory(name: str) -> Callable:
    """The factory ``model.name`` names: one of :data:`MODELS`, or a plug-in (an import path
    ``package.module:factory`` or an installed entry point, :mod:`fedpd.names`)."""
    return names.resolve(KIND, name, key="model.name").build


def build_model(name: str | Callable, *, input_shape: Sequence[int], num_classes: int, **options) -> nn.Module:
    """A fresh model for samples of ``input_shape`` (one sample, e.g. ``(1, 28, 28)``, ``(784,)`` or
    ``(80,)`` for a token sequence) and ``num_classes`` outputs: ``name`` of :data:`MODELS`, or a
    model factory ``(input_shape, num_classes, **options) -> nn.Module`` of the user's.

    Seed torch (``torch.manual_seed``) first for a reproducible initialisation. Raises
    :class:`ConfigError` (one line) for an unknown model or an unknown or invalid option.
    """
    if callable(name):
        factory, name = name, getattr(name, "__qualname__", repr(name))
    elif not isinstance(name, str) or name not in MODELS:
        raise ConfigError(f"unknown model {_short(name)} (allowed: {', '.join(sorted(MODELS))})")
    else:
        factory, _ = MODELS[name]
    allowed = _options(factory)
    allowed_text = ", ".join(allowed) if allowed else "none"
    check_model_options(factory, name, options)
    try:
        shape = _ints("input_shape", tuple(input_shape) if isinstance(input_shape, (list, tuple)) else input_shape)
        if not shape:
            raise ConfigError("input_shape must not be empty")
        module = factory(shape, _int("num_classes", num_classes), **options)
    except ConfigError as e:
        raise ConfigError(f"model {name!r}: {e} (options: {allowed_text})") from None
    if not isinstance(module, nn.Module):
        raise ConfigError(f"model.name: {name} returned {type(module).__name__}, not a torch.nn.Module")
    return module


def check_no_running_stats(module: nn.Module, name: str) -> None:
    """A layer that updates running statistics in training (BatchNorm, or InstanceNorm with
    ``track_running_stats``) is refused in one line: fedpd trains flat parameter vectors of many
    clients at once, and buffers are neither per client nor part of the model that is sent."""
    from torch.nn.modules.batchnorm import _NormBase

    for path, layer in module.named_modules():
        if isinstance(layer, _NormBase) and layer.track_running_stats:
            raise ConfigError(f"model.name: {name} has a {type(layer).__name__} layer ({path or 'the model'}) with "
                              f"running statistics, which fedpd cannot train (allowed: GroupNorm or LayerNorm, or "
                              f"{type(layer).__name__}(..., track_running_stats=False))")


def check_outputs(module: nn.Module, sample: Tensor, num_classes: int, name: str) -> None:
    """One forward of one sample ([1, ...]) must give [1, num_classes] logits, and the module keep
    no running statistics (BatchNorm's): ConfigError otherwise."""
    check_no_running_stats(module, name)
    shape = tuple(sample.shape[1:])
    try:
        with torch.no_grad():
            out = module(sample)
    except Exception as err:
        raise ConfigError(f"model.name: {name} fails on one sample of shape {shape}: {reason(err, 200)}") from None
    got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
    if got != (1, num_classes):
        raise ConfigError(f"model.name: {name} gives outputs of shape {got} for one sample of shape {shape}; the "
                          f"data has {num_classes} classes (allowed: a model with {num_classes} outputs, [batch, "
                          f"{num_classes}])")
