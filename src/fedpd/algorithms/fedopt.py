"""The FedOpt family: FedAvg whose server takes an optimiser step on the pseudo-gradient.

Written as a user's algorithm is (docs/extending.md): it subclasses FedAvg
(:class:`fedpd.algorithms.FedAvg`, imported from its own module so that :mod:`fedpd.algorithms`
can export this family too) and extends its options.

The participants train from the server model x_t exactly as in FedAvg and upload x_i; FedAvg's
aggregate (the mean, or ``algorithm.aggregator``, weighted with ``weights = "samples"``) gives
x̄_t, and the pseudo-gradient is

    Δ_t = x̄_t − x_t        (= (1/|S|) Σ_{i∈S} Δ_i^t with Δ_i^t = x_i − x_t for the mean).

The server then takes one step of its optimiser, every operation per coordinate:

* **FedAvgM** (server momentum; Hsu, Qi, Brown, "Measuring the effects of non-identical data
  distribution for federated visual classification", 2019):
  m_t = β m_{t−1} + Δ_t,   x_{t+1} = x_t + η m_t.
* **FedAdagrad, FedAdam, FedYogi** (Reddi, Charles, Zaheer, Garrett, Rush, Konečný, Kumar,
  McMahan, "Adaptive Federated Optimization", ICLR 2021, Algorithm 2):
  m_t = β1 m_{t−1} + (1 − β1) Δ_t, then
  v_t = v_{t−1} + Δ_t²                              (FedAdagrad),
  v_t = β2 v_{t−1} + (1 − β2) Δ_t²                  (FedAdam),
  v_t = v_{t−1} − (1 − β2) Δ_t² sign(v_{t−1} − Δ_t²)  (FedYogi),
  x_{t+1} = x_t + η m_t / (√v_t + τ).

m_{−1} = 0; v_{−1} = τ², the smallest value Algorithm 2 allows (it asks v_{−1} ≥ τ²). There is
no bias correction (Algorithm 2 has none). β1 = 0.9 and β2 = 0.99 are the settings of the
paper's experiments (FedAdagrad defaults to β1 = 0: plain Adagrad steps); τ = 10⁻³ and η = 0.1
are our defaults (the paper tunes η per task and studies the effect of τ). m and v live in
the server state (O(d), checkpointed); a round sends what FedAvg sends (d down, d up).
"""

from __future__ import annotations

import torch
from pydantic import Field

from fedpd.algorithms.fedavg import FedAvg


class ServerOptimiser(FedAvg):
    """FedAvg's aggregate x̄_t, then the server's optimiser step (:meth:`step`) from it. Not a config
    name itself. With the plain mean FedAvg's aggregate is its ``aggregate_means`` (a round may
    stream the uploads' means), so the step is taken there; with a robust aggregator, after it."""

    def step(self, server, averaged):
        """The new server state from the state of before and FedAvg's (x0 = x̄_t)."""
        raise NotImplementedError

    def aggregate(self, server, uploads, ctx):
        if self.means_only:  # FedAvg's aggregate calls aggregate_means, which steps
            return super().aggregate(server, uploads, ctx)
        averaged, reply = super().aggregate(server, uploads, ctx)
        return self.step(server, averaged), reply

    def aggregate_means(self, server, means, ctx):
        averaged, reply = super().aggregate_means(server, means, ctx)
        return self.step(server, averaged), reply


class FedAvgMOptions(FedAvg.Options):
    eta: float = Field(1.0, gt=0, description="η, the server learning rate (η = 1, β = 0: FedAvg)")
    beta: float = Field(0.9, ge=0, lt=1, description="β, the server momentum")


class FedAvgM(ServerOptimiser):
    """FedAvgM (Hsu, Qi, Brown 2019): FedAvg with server momentum on Δ_t = x̄_t − x_t,
    m_t = β m_{t−1} + Δ_t, x_{t+1} = x_t + η m_t (module docstring)."""

    name = "fedavgm"
    description = "FedAvgM: FedAvg with server momentum m = beta m + (mean x_i - x0), x0 += eta m"
    Options = FedAvgMOptions

    def __init__(self, eta: float = 1.0, beta: float = 0.9, **fedavg_options):
        super().__init__(**fedavg_options)
        self.eta, self.beta = eta, beta

    def init_server(self, x0):
        return {**super().init_server(x0), "m": torch.zeros_like(x0)}

    def step(self, server, averaged):
        m = self.beta * server["m"] + (averaged["x0"] - server["x0"])
        return {**averaged, "x0": server["x0"] + self.eta * m, "m": m}


class FedAdaptiveOptions(FedAvg.Options):
    eta: float = Field(0.1, gt=0, description="η, the server learning rate")
    beta1: float = Field(0.9, ge=0, lt=1, description="β1, the first-moment (momentum) decay")
    tau: float = Field(1e-3, gt=0, description="τ, the adaptivity: the step divides by √v + τ; v starts at "
                       "τ²")


class FedAdamOptions(FedAdaptiveOptions):
    beta2: float = Field(0.99, ge=0, lt=1, description="β2, the second-moment decay")


class FedAdaptive(ServerOptimiser):
    """The adaptive server step of Reddi et al. (ICLR 2021) Algorithm 2; a subclass says how v is
    updated (:meth:`second_moment`). Not a config name itself."""

    def __init__(self, eta: float = 0.1, beta1: float = 0.9, tau: float = 1e-3, beta2: float = 0.99,
                 **fedavg_options):
        super().__init__(**fedavg_options)
        self.eta, self.beta1, self.tau, self.beta2 = eta, beta1, tau, beta2

    def init_server(self, x0):
        return {**super().init_server(x0), "m": torch.zeros_like(x0), "v": torch.full_like(x0, self.tau ** 2)}

    def second_moment(self, v, delta_sq):
        """v_t from v_{t−1} and Δ_t² (per coordinate)."""
        raise NotImplementedError

    def step(self, server, averaged):
        delta = averaged["x0"] - server["x0"]
        m = self.beta1 * server["m"] + (1 - self.beta1) * delta
        v = self.second_moment(server["v"], delta * delta)
        x0 = server["x0"] + self.eta * m / (v.sqrt() + self.tau)
        return {**averaged, "x0": x0, "m": m, "v": v}


class FedAdagradOptions(FedAdaptiveOptions):
    beta1: float = Field(0.0, ge=0, lt=1, description="β1, the first-moment decay (0: Adagrad steps on Δ_t itself)")


class FedAdagrad(FedAdaptive):
    """FedAdagrad (Reddi et al., ICLR 2021, Alg. 2): v_t = v_{t−1} + Δ_t²; β1 = 0 by default
    (Alg. 2 allows any β1 in [0, 1))."""

    name = "fedadagrad"
    description = "FedAdagrad: server Adagrad on the pseudo-gradient mean x_i - x0 (Reddi et al. 2021, Alg. 2)"
    Options = FedAdagradOptions

    def __init__(self, eta: float = 0.1, beta1: float = 0.0, tau: float = 1e-3, **fedavg_options):
        super().__init__(eta, beta1, tau, **fedavg_options)

    def second_moment(self, v, delta_sq):
        return v + delta_sq


class FedAdam(FedAdaptive):
    """FedAdam (Reddi et al., ICLR 2021, Alg. 2): v_t = β2 v_{t−1} + (1 − β2) Δ_t²."""

    name = "fedadam"
    description = "FedAdam: server Adam on the pseudo-gradient mean x_i - x0 (Reddi et al. 2021, Alg. 2)"
    Options = FedAdamOptions

    def second_moment(self, v, delta_sq):
        return self.beta2 * v + (1 - self.beta2) * delta_sq


class FedYogi(FedAdaptive):
    """FedYogi (Reddi et al., ICLR 2021, Alg. 2): v_t = v_{t−1} − (1 − β2) Δ_t² sign(v_{t−1} − Δ_t²)."""

    name = "fedyogi"
    description = "FedYogi: server Yogi on the pseudo-gradient mean x_i - x0 (Reddi et al. 2021, Alg. 2)"
    Options = FedAdamOptions

    def second_moment(self, v, delta_sq):
        return v - (1 - self.beta2) * delta_sq * torch.sign(v - delta_sq)
