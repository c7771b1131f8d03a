"""A real dataset as a federated problem: load it (:mod:`fedpd.data`), partition the training set
over clients, pick the test data, and build the model from the config's ``[model]`` section.

Partitions (``fedpd.data.partition``): iid, dirichlet (label skew, Hsu et al. 2019, concentration
``alpha``; ``balanced``: equal client sizes, each client's label mix ~ Dir(alpha), as FL-Simulator's
``dataset.py``), shards (``classes_per_client`` labels each, McMahan et al. 2017), power_law (size skew),
label_power_law (FedProx's MNIST split: a few labels per client, power-law sizes) and natural (one
client per LEAF user); ``keep_clients`` keeps the partition's first K clients. Test data: ``pooled``
uses the dataset's own test set (for natural partitions each user's own test samples; otherwise
dealt IID over the clients so that per-client metrics stay defined — pooled metrics do not depend
on the deal); ``per_client`` splits every client's training samples into train / test with
``test_fraction``.

``normalize`` standardises with the training set's statistics: images per channel, other
floating-point samples (a table's ``[N, F]`` features) per feature; token ids are left as they are.
``augment`` applies random crop (4-pixel zero padding) + horizontal flip to every SGD minibatch (the
A-FedPD / FedSpeed CIFAR recipe); full-batch GD and evaluation see the plain images.

Token models (``char_lstm``, ``sentiment_lstm``) get the dataset's vocabulary size unless ``[model]``
sets one; ``glove_path`` (Sent140) initialises the word embedding from a GloVe text file.

A user's table: ``dataset = "csv"`` or ``"npz"`` with ``path`` (:mod:`fedpd.data.loaders.tabular`).
A user's data and model: ``dataset = "module:loader"`` names a loader function
(:mod:`fedpd.data.loaders.arrays`; ``dataset_options``: its keyword options) and
``model.name = "module:factory"`` a model factory ``(input_shape, num_classes, **options) ->
torch.nn.Module``; everything above applies to them as to the built-ins, and one forward of one
sample checks that the model has one output per class.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch
from pydantic import Field, field_validator, model_validator
from torch import Tensor

from fedpd.data import (load_glove, partition as make_partition, random_crop_flip, resolve_data_dir,
                        train_test_split_per_client)
from fedpd.data.loaders import DATASETS, canonical_name, dataset_options as loader_options
from fedpd.data.loaders.user import check_options, load_user_dataset, user_loader
from fedpd.errors import ConfigError
from fedpd.flat import FlatModel
from fedpd.models import MODELS, build_model, check_outputs, model_factory, model_options
from fedpd.options import Options, SEED_MAX, declares, refuse
from fedpd.ordered import BLOCK, ordered_sum
from fedpd.plugins import PluginError
from fedpd.problems import losses
from fedpd.problems.base import ClientSplit, Problem

#: the model a dataset gets when ``[model]`` names none
DEFAULT_MODELS = {
    "mnist": "logistic", "fashion-mnist": "logistic", "cifar10": "lenet", "cifar100": "lenet",
    "femnist": "femnist_cnn", "shakespeare": "char_lstm", "sent140": "sentiment_lstm", "image-folder": "logistic",
}

#: datasets whose canonical files have known sizes and SHA-256 sums (``verify`` applies)
VERIFIED = ("mnist", "fashion-mnist", "cifar10", "cifar100")


@dataclass
class AugmentedSplit(ClientSplit):
    """A training split whose minibatches are randomly cropped and flipped (images [n, C, H, W])."""

    uniforms_per_sample = 4  # its position, then (after the batch's positions) its crop and flip

    def batch_from(self, ids: Tensor, u: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        b = u.shape[1] // 4
        X, Y, W = super().batch_from(ids, u[:, :b])
        return random_crop_flip(X, u[:, b:].reshape(u.shape[0], b, 3)), Y, W  # the crops: each client's own draws


def _split(x: Tensor, y: Tensor, parts: list[np.ndarray], cls: type[ClientSplit] = ClientSplit) -> ClientSplit:
    index = torch.from_numpy(np.concatenate(parts).astype(np.int64)) if parts else torch.zeros(0, dtype=torch.int64)
    sizes = torch.tensor([len(p) for p in parts], dtype=torch.int64)
    offsets = torch.cat([torch.zeros(1, dtype=torch.int64), sizes.cumsum(0)])
    return cls(x[index], y[index], offsets)


def _subsample(x: Tensor, y: Tensor, users: Tensor | None, limit: int | None, rng: np.random.Generator):
    if limit is None or limit >= len(y):
        return x, y, users
    keep = torch.from_numpy(np.sort(rng.choice(len(y), limit, replace=False)))
    return x[keep], y[keep], (users[keep] if users is not None else None)


#: samples converted to float64 at a time for :func:`channel_statistics`
STATISTICS_CHUNK = 1024


def channel_statistics(x: Tensor) -> tuple[Tensor, Tensor]:
    """Per channel of images x [n, C, H, W]: the mean and the sample standard deviation (n·H·W − 1
    in the denominator, at least 1e-6), as [1, C, 1, 1] in x's dtype. Summed in float64: each
    image's pixels by one call, the images' sums in order (:func:`fedpd.ordered.ordered_sum`), so
    the statistics — and every standardised image — are the same bits at any thread count."""
    n, count = x.shape[0], x.shape[0] * x.shape[2] * x.shape[3]

    def per_image(f) -> Tensor:  # [n, C] float64, in chunks of images (no float64 copy of x)
        return torch.cat([f(x[a:a + STATISTICS_CHUNK].double()).sum(dim=(2, 3)) for a in range(0, n, STATISTICS_CHUNK)])

    mean = (ordered_sum(per_image(lambda b: b), 0) / count).reshape(1, -1, 1, 1)
    var = ordered_sum(per_image(lambda b: (b - mean) ** 2), 0) / max(1, count - 1)
    return mean.to(x.dtype), var.sqrt().clamp_min(1e-6).reshape(1, -1, 1, 1).to(x.dtype)


def feature_statistics(x: Tensor) -> tuple[Tensor, Tensor]:
    """Per feature of samples x [n, ...] (a table's [n, F]): the mean over the n samples and the
    sample standard deviation (n − 1 in the denominator, at least 1e-6, so a constant feature
    becomes 0), as [1, ...] in x's dtype. Summed in float64 in blocks of samples added in order
    (:func:`fedpd.ordered.ordered_sum`): the same bits at any thread count."""
    n = x.shape[0]
    mean = ordered_sum(x, 0, dtype=torch.float64) / n
    var = torch.zeros_like(mean)
    for a in range(0, n, BLOCK):  # ordered_sum's blocks, without a float64 copy of x
        var = var + ordered_sum((x[a:a + BLOCK].double() - mean) ** 2, 0)
    var = var / max(1, n - 1)
    return mean[None].to(x.dtype), var.sqrt().clamp_min(1e-6)[None].to(x.dtype)


#: options that only a built-in dataset's files have (a user's loader returns arrays)
FILE_OPTIONS = ("path", "test_path", "label_column", "client_column", "holdout", "vocab_size", "seq_len", "label_mode",
                "glove_path")


#: the partitions' own options (fedpd.data.partition): each reads these and no others
PARTITION_READS = {"iid": set(), "dirichlet": {"alpha", "min_size", "balanced"}, "shards": {"classes_per_client"},
                   "power_law": {"exponent", "min_size"}, "label_power_law": {"classes_per_client", "min_size"},
                   "natural": set()}
PARTITION_READS["all"] = set().union(*PARTITION_READS.values())


class DatasetOptions(Options):
    dataset: str = Field(description="dataset name (fedpd data list), or a loader's import path module:function "
                         "(or an installed entry point's name)")
    data_dir: str | None = Field(None, description="default: $FEDPD_DATA, else ~/.cache/fedpd/data")
    clients: int = Field(100, ge=1, description="ignored by the natural partition (one client per user)")
    partition: Literal["iid", "dirichlet", "shards", "power_law", "label_power_law", "natural"] = Field(
        "iid", description='how the training samples are split into clients')
    alpha: float = Field(0.5, gt=0, description="Dirichlet concentration")
    classes_per_client: int = Field(2, ge=1, description="shards, label_power_law: labels per client")
    min_size: int = Field(1, ge=0, description="dirichlet / power_law: fewest samples per client; label_power_law: "
                          "per client and label")
    keep_clients: int | None = Field(None, ge=1, description="only the first K clients of the partition, with their "
                                     "data (a federation of K of its parties; the rest of the data is unused)")
    balanced: bool = Field(False, description="dirichlet: every client n/N samples, its label mix ~ Dir(alpha) "
                           "(the A-FedPD authors' FL-Simulator split)")
    exponent: float = Field(1.5, gt=0, description="power_law exponent")
    test: Literal["pooled", "per_client"] = Field(
        "pooled", description="pooled: one test set for the server model; per_client: a test split per client"
    )
    test_fraction: float = Field(0.2, ge=0, lt=1, description="per_client: share of each client's samples")
    max_samples: int | None = Field(None, ge=1, description="random training subsample (quick runs)")
    max_test_samples: int | None = Field(None, ge=1, description="random test subsample")
    normalize: bool = Field(True, description="standardise with training statistics: images per channel, other "
                            "float samples (tables) per feature; token ids never")
    augment: bool = Field(False, description="random crop + flip on SGD minibatches (images)")
    seed: int = Field(0, ge=0, le=SEED_MAX, description="partition, subsample, model initialisation and a table's "
                      "holdout")
    verify: bool = Field(True, description="check canonical file sizes and SHA-256 (mnist, fashion-mnist, cifar)")
    path: str | None = Field(None, description="image-folder: folder or .tar.gz; csv, npz: the file (absolute, "
                             "relative to the working directory, or under data_dir)")
    test_path: str | None = Field(None, description="csv, npz: a second file of the same columns, the test set")
    label_column: str | None = Field(None, description="csv: the column of the labels (default \"label\")")
    client_column: str | None = Field(None, description="csv: a column of each row's owner (the natural partition)")
    holdout: float | None = Field(None, gt=0, lt=1, description="csv, npz without a test set: the share of rows held "
                                  "out as the test set, seeded by seed (default 0.2)")
    vocab_size: int | None = Field(None, ge=3, description="sent140: words kept incl. <pad>, <unk> (default 10000)")
    seq_len: int | None = Field(None, ge=1, description="sent140: tokens per tweet, front-padded (default 25)")
    label_mode: Literal["fine", "coarse"] | None = Field(None, description="cifar100: 100 fine or 20 coarse labels")
    glove_path: str | None = Field(None, description="sent140: GloVe text file for the word embedding")
    dataset_options: dict[str, Any] | None = Field(None, description="a loader plug-in's options, passed "
                                            "to it as keywords (checked against its signature)")

    @field_validator("dataset_options")
    @classmethod
    def _empty_is_none(cls, value):
        return value or None  # {} and no table are one config (records and checkpoints written with {} match)

    @field_validator("dataset")
    @classmethod
    def _loader(cls, value: str) -> str:
        try:
            user_loader(value)  # a user's loader must exist; fedpd's datasets are found when loaded
        except PluginError as err:
            raise ValueError(str(err)) from None
        return value

    @model_validator(mode="after")
    def _read_by_the_partition(self):
        """An option the chosen partition (or test split) does not read is refused: it would be ignored."""
        for key in self.given(*PARTITION_READS["all"] - PARTITION_READS[self.partition]):
            readers = ", ".join(p for p, keys in PARTITION_READS.items() if key in keys and p != "all")
            raise refuse(key, f"partition = \"{self.partition}\" does not read it (allowed: no {key}, or "
                         f"partition = {readers})")
        if self.partition == "natural" and self.given("clients"):
            raise refuse("clients", "the natural partition has one client per user of the data set (allowed: no "
                         "clients; keep_clients = K for the first K of them)")
        if self.test != "per_client" and self.given("test_fraction"):
            raise refuse("test_fraction", f"is the per_client test split's share; test = \"{self.test}\" (allowed: "
                         f"no test_fraction, or test = \"per_client\")")
        return self

    @model_validator(mode="after")
    def _balanced_dirichlet(self):
        if self.balanced and self.partition != "dirichlet":
            raise refuse("balanced", f"equal client sizes with label mixes ~ Dir(alpha) are the dirichlet partition's; "
                         f"partition = \"{self.partition}\" (allowed: false, or partition = \"dirichlet\")")
        return self

    @model_validator(mode="after")
    def _loader_options(self):
        loader = user_loader(self.dataset)
        for option in FILE_OPTIONS if loader is not None else ():
            if getattr(self, option) is not None:
                raise refuse(option, "not an option of a loader's dataset (it returns its arrays itself; its own "
                             "options go in dataset_options)")
        if loader is None and self.dataset_options:
            raise refuse("dataset_options", f"only a loader plug-in takes them; {self.dataset}'s options are keys of "
                         f"[problem] (allowed: {{}}, or dataset = \"module:function\")")
        wrong = check_options(loader, self.dataset, self.dataset_options or {}) if loader is not None else None
        if wrong:
            raise refuse("dataset_options" if self.dataset_options else "dataset", wrong)
        return self


@declares("dataset", DatasetOptions, "a real dataset (fedpd data list) partitioned over clients; model from [model]")
def dataset_problem(
    *,
    dataset: str,
    data_dir: str | None = None,
    clients: int = 100,
    partition: str = "iid",
    alpha: float = 0.5,
    classes_per_client: int = 2,
    min_size: int = 1,
    balanced: bool = False,
    exponent: float = 1.5,
    keep_clients: int | None = None,
    test: str = "pooled",
    test_fraction: float = 0.2,
    max_samples: int | None = None,
    max_test_samples: int | None = None,
    normalize: bool = True,
    augment: bool = False,
    seed: int = 0,
    verify: bool = True,
    path: str | None = None,
    test_path: str | None = None,
    label_column: str | None = None,
    client_column: str | None = None,
    holdout: float | None = None,
    vocab_size: int | None = None,
    seq_len: int | None = None,
    label_mode: str | None = None,
    glove_path: str | None = None,
    dataset_options: dict | None = None,
    model: dict | None = None,
) -> Problem:
    """``dataset`` (see ``fedpd data list``) split over ``clients`` by ``partition``, with the model
    ``model`` = {"name": ..., **options for fedpd.models.build_model} (name "auto" or absent: the
    dataset's default, :data:`DEFAULT_MODELS`). Data are float32; x_init is the model's seeded init.

    ``path``, ``test_path``, ``holdout`` (csv, npz), ``label_column``, ``client_column`` (csv),
    ``vocab_size`` / ``seq_len`` (sent140) and ``label_mode`` (cifar100) go to the loader (None: its
    default); ``glove_path`` (sent140) is a GloVe text file for the word embedding;
    ``dataset_options`` are a loader plug-in's keywords."""
    if user_loader(dataset) is not None:  # a user's loader: its arrays, checked
        key, ds = dataset, load_user_dataset(dataset, dataset_options)
    else:
        try:
            key = canonical_name(dataset)
        except ConfigError as err:  # name the config key, keep the list of datasets
            raise ConfigError(f"problem.dataset: {err}") from None
        options = {} if verify or key not in VERIFIED else {"verify": False}
        if key == "image-folder" and not path:  # the user's own train/<class>/ + test/<class>/ tree
            raise ConfigError("problem.path: missing; image-folder needs path = <folder or .tar.gz> "
                              "(absolute or under the data dir)")
        if key in ("csv", "npz"):  # the user's own table
            if not path:
                raise ConfigError(f"problem.path: missing; {key} needs path = <file.{key}> (absolute, relative to "
                                  f"the working directory, or under the data dir)")
            options["seed"] = seed  # the holdout's draw
        given = dict(path=path, test_path=test_path, label_column=label_column, client_column=client_column,
                     holdout=holdout, vocab_size=vocab_size, seq_len=seq_len, label_mode=label_mode)
        for option, value in given.items():
            if value is not None:
                if option not in loader_options(key):
                    users = ", ".join(n for n in DATASETS if option in loader_options(n))
                    raise ConfigError(f"problem.{option}: not an option of {key} (it applies to {users})")
                options[option] = value
        if glove_path is not None and key != "sent140":
            raise ConfigError(f"problem.glove_path: word vectors need a word vocabulary; {key} has none (allowed: "
                              f"sent140)")
        from fedpd.data.download import load_or_say_how  # (urllib: only for a dataset of fedpd's)

        ds = load_or_say_how(key, data_dir, **options)  # DataError (one line) when files are missing or corrupt
    rng = np.random.default_rng(seed)
    images = ds.x_train.is_floating_point() and ds.x_train.dim() == 4
    if augment and not images:
        raise ConfigError(f"problem.augment: needs image data; {key} has samples of shape "
                          f"{tuple(ds.x_train.shape[1:])} (allowed: false)")
    if partition == "natural" and ds.train_users is None:
        raise ConfigError(
            f"problem.partition: 'natural' needs each sample's user (a LEAF dataset, or a loader that "
            f"returns client_train); {key} has none (allowed: iid, dirichlet, shards, power_law, label_power_law)"
        )

    x_tr, y_tr, u_tr = _subsample(ds.x_train, ds.y_train, ds.train_users, max_samples, rng)
    x_te, y_te, u_te = _subsample(ds.x_test, ds.y_test, ds.test_users, max_test_samples, rng)
    if normalize and ds.x_train.is_floating_point():  # standardised with training statistics; token ids never
        mean, std = (channel_statistics if images else feature_statistics)(x_tr)
        x_tr, x_te = (x_tr - mean) / std, (x_te - mean) / std

    labels = y_tr.numpy()
    if partition != "natural" and clients > len(labels):
        raise ConfigError(f"problem.clients: {clients} clients for {len(labels)} training samples "
                          f"(allowed: 1..{len(labels)})")
    try:
        parts = make_partition(partition, labels, clients, seed, alpha=alpha, classes_per_client=classes_per_client,
                               min_size=min_size, exponent=exponent, balanced=balanced,
                               user_ids=u_tr.numpy() if u_tr is not None else None)
    except ConfigError as err:  # e.g. clients x min_size > samples: say which section it comes from
        raise ConfigError(f"problem.partition: {err}") from None
    if keep_clients is not None:
        if keep_clients > len(parts):
            raise ConfigError(f"problem.keep_clients: {keep_clients} of the partition's {len(parts)} clients "
                              f"(allowed: 1..{len(parts)})")
        parts = parts[:keep_clients]
    train_cls = AugmentedSplit if augment else ClientSplit
    pooled_slices = False  # each client's test split an i.i.d. slice of the pooled test set (not its own data)
    if test == "per_client":
        tr_parts, te_parts = train_test_split_per_client(parts, test_fraction, seed)
        train, test_split = _split(x_tr, y_tr, tr_parts, train_cls), _split(x_tr, y_tr, te_parts)
    else:
        if partition == "natural" and u_te is not None:  # each user's own test samples (LEAF keeps the user ids)
            users = np.unique(u_tr.numpy())
            owner = u_te.numpy()
            te_parts = [np.flatnonzero(owner == u) for u in users]
        else:
            te_parts = make_partition("iid", y_te.numpy(), len(parts), seed) if len(y_te) >= len(parts) else \
                [np.arange(len(y_te)) if i == 0 else np.zeros(0, np.int64) for i in range(len(parts))]
            pooled_slices = True
        train, test_split = _split(x_tr, y_tr, parts, train_cls), _split(x_te, y_te, te_parts)

    spec = dict(model or {})
    name = spec.pop("name", "auto")
    name = DEFAULT_MODELS.get(key, "logistic") if name == "auto" else name
    factory = model_factory(name)
    accepts = model_options(factory)
    vocab = ds.meta.get("vocab_size")  # token datasets: ids are 0 .. vocab - 1
    if vocab is not None and "vocab_size" in accepts:
        given = spec.setdefault("vocab_size", vocab)
        if isinstance(given, int) and not isinstance(given, bool) and given < vocab:
            raise ConfigError(f"model.vocab_size: {given} is below {key}'s {vocab} token ids "
                              f"(allowed: >= {vocab}, or leave it out to use the dataset's)")
    if glove_path is not None:
        if "embedding_weights" not in accepts or "embedding_weights" in spec:
            raise ConfigError(f"problem.glove_path: model {name!r} takes no word vectors "
                              f"(allowed: sentiment_lstm without model.embedding_weights)")
        glove = Path(glove_path).expanduser()
        if not glove.is_absolute() and not glove.exists():
            glove = resolve_data_dir(data_dir) / glove
        spec["embedding_weights"] = load_glove(glove, ds.meta["vocab"], seed)
    with torch.random.fork_rng(devices=[]):  # seeded init without touching the global stream
        torch.manual_seed(seed)
        module = build_model(name if name in MODELS else factory, input_shape=tuple(ds.x_train.shape[1:]),
                             num_classes=ds.num_classes, **spec)
        check_outputs(module, x_tr[:1], ds.num_classes, name)  # one forward: one output per class
    flat = FlatModel(module)
    return Problem(
        name=f"dataset:{key}",
        train=train,
        test=test_split,
        model=flat,
        loss=losses.cross_entropy,
        x_init=flat.initial(torch.float32),
        classifies=True,
        predict=losses.argmax_predict,
        info={"dataset": key, "model": name, "partition": partition, "num_classes": ds.num_classes,
              "classes": ds.classes, "dtype": torch.float32, "pooled_test_slices": pooled_slices},
    )
