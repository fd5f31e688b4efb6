"""Opacus DP-SGD inside every client: per-example clipping, Gaussian noise, Poisson sampling, one accountant per
client kept across rounds in the mechanism's own per-client store (and in checkpoints)."""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable, Iterable, Iterator
from itertools import takewhile
from operator import itemgetter
from typing import TYPE_CHECKING, Literal, cast
from weakref import WeakKeyDictionary

import torch
from lightning import LightningModule
from lightning.fabric import Fabric
from lightning.fabric.utilities.apply_func import apply_to_collection
from lightning.pytorch.utilities.data import extract_batch_size
from torch import Tensor, nn

from lightfed.core.batch_norms import BATCH_NORMS
from lightfed.core.local_context import LocalContext
from lightfed.core.local_session import LocalSession
from lightfed.core.messages import ClientPlan
from lightfed.core.requirements import Requirements
from lightfed.data.module import Batch, FederatedDataModule
from lightfed.errors import ConfigError
from lightfed.privacy.accountant import (
    STATE,
    accountant_state,
    compose,
    load_accountant,
    poisson_schedule,
    spent_epsilon,
)
from lightfed.privacy.base import ClientPrivacy

if TYPE_CHECKING:  # Opacus is imported by the runs that use it
    from opacus.accountants.accountant import IAccountant
    from opacus.utils.uniform_sampler import UniformWithReplacementSampler


def gradients_per_step(plan: ClientPlan) -> int:
    """Private gradients each local step releases: 2 under a sharpness-aware rule, else 1."""
    return 1 if plan.rule is None else plan.rule.gradients_per_step


def convert_in_place(module: nn.Module) -> None:
    """Replaces the submodules Opacus can fix (BatchNorm -> GroupNorm, ...) with its fixers, keeping ``module``."""
    from opacus.validators import ModuleValidator

    for name, sub in list(module.named_modules()):
        fixer = ModuleValidator.FIXERS.get(type(sub))
        if fixer is not None and name:
            parent, _, child = name.rpartition(".")
            setattr(module.get_submodule(parent), child, fixer(sub))


def poisson_batches(
    data: FederatedDataModule, plan: ClientPlan, sampler: UniformWithReplacementSampler, generator: torch.Generator
) -> Iterator[Batch]:
    """The plan's Poisson batches (its epochs' or steps' worth) of the client's data, as Opacus' ``DPDataLoader``
    draws them from ``sampler``; augmented with ``generator``."""
    steps, taken = plan.steps, 0
    passes = cast(int, plan.epochs) if steps is None else math.ceil(steps / len(sampler))
    for _ in range(passes):
        # the draw Opacus' DPDataLoader makes as a pass starts (its workers' base seed): the same batches as it
        torch.empty((), dtype=torch.int64).random_(generator=sampler.generator)
        for positions in sampler:
            if taken == steps:
                return
            taken += 1
            yield data.client_subset(plan.client_id, torch.tensor(positions, dtype=torch.int64), generator)


def expected_batch_size(sampler: UniformWithReplacementSampler) -> int:
    """The batch size a private gradient is divided by, as ``make_private`` sets it for ``sampler``'s data loader."""
    return int(sampler.num_samples * (1 / len(sampler)))


class DPSGD(ClientPrivacy):
    """Example-level DP-SGD (Abadi et al. 2016) through Opacus ``make_private`` on the raw module, for every client.

    Each step's batch is a Poisson sample of the client's data (rate 1 / ceil(examples / batch size)); every
    per-example gradient is clipped to ``max_grad_norm`` and Gaussian noise of std noise_multiplier * max_grad_norm
    is added to their sum. Each client has its own accountant, kept across rounds and in checkpoints; epsilon (at
    ``target_delta``) is logged per round as the max and mean over the clients that have trained.

    Under a sharpness-aware rule a step releases two private gradients of the same Poisson batch; that step is
    accounted as one subsampled Gaussian mechanism with noise noise_multiplier / sqrt(2) (see docs/guides/privacy.md).

    In a config:

    ```yaml
    trainer:
      privacy:
        class_path: lightfed.privacy.DPSGD
        init_args: {noise_multiplier: 1.0, max_grad_norm: 1.0, target_epsilon: 8.0, target_delta: 1.0e-05}
    ```

    Examples:
        A budget makes the run stop before a client would exceed it; a mechanism needs noise or a budget:

        >>> from lightfed.privacy import DPSGD
        >>> DPSGD(noise_multiplier=1.0, target_epsilon=8.0).limits_budget
        True
        >>> DPSGD(noise_multiplier=1.0).limits_budget
        False
        >>> DPSGD()
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: trainer.privacy needs noise_multiplier or target_epsilon (or both)
    """

    requirements = Requirements(client_state=True)  # one accountant per client, where the client trains

    def __init__(
        self,
        noise_multiplier: float | None = None,
        max_grad_norm: float = 1.0,
        target_epsilon: float | None = None,
        target_delta: float = 1e-5,
        accountant: Literal["rdp", "prv"] = "rdp",
        max_physical_batch_size: int | None = None,
        convert_batchnorm: bool = False,
        secure_mode: bool = False,
        grad_sample_mode: Literal["hooks", "functorch"] = "hooks",
    ) -> None:
        """
        Args:
            noise_multiplier: Noise std over the clipping bound, per private gradient. Null: set from the budget
                (target_epsilon, target_delta) over every step each client is planned to take in the run.
            max_grad_norm: Clipping bound C of every per-example gradient.
            target_epsilon: Privacy budget per client: with a noise multiplier, the run stops (with a checkpoint)
                before any client would exceed it (refused when a client of round 1 would); without one, it sets each
                client's noise.
            target_delta: Delta at which epsilon is computed and logged.
            accountant: Opacus accountant: "rdp" (Renyi DP) or "prv" (privacy random variables).
            max_physical_batch_size: Largest batch evaluated at once; larger Poisson batches are split and their
                clipped per-example gradients accumulated before the noise (as Opacus' BatchMemoryManager does).
            convert_batchnorm: Replace BatchNorm by GroupNorm (Opacus' ModuleValidator fixers) instead of refusing.
            secure_mode: Opacus' cryptographically safe noise (slower).
            grad_sample_mode: How Opacus computes per-example gradients: "hooks" (its per-layer formulas) or
                "functorch" (vmap of every layer's gradient); see docs/results/performance-dp.md.
        """
        if noise_multiplier is None and target_epsilon is None:
            raise ConfigError("trainer.privacy needs noise_multiplier or target_epsilon (or both)")
        if noise_multiplier is not None and noise_multiplier < 0:
            raise ConfigError(f"trainer.privacy.noise_multiplier must be >= 0, got {noise_multiplier}")
        if max_grad_norm <= 0:
            raise ConfigError(f"trainer.privacy.max_grad_norm must be > 0, got {max_grad_norm}")
        if target_epsilon is not None and target_epsilon <= 0:
            raise ConfigError(f"trainer.privacy.target_epsilon must be > 0, got {target_epsilon}")
        if target_epsilon is not None and noise_multiplier == 0:
            raise ConfigError(
                "trainer.privacy.target_epsilon needs noise: with noise_multiplier 0 epsilon is infinite from the first "
                "step (set noise_multiplier > 0, or null to set it from the budget)"
            )
        if not 0 < target_delta < 1:
            raise ConfigError(f"trainer.privacy.target_delta must be in (0, 1), got {target_delta}")
        if max_physical_batch_size is not None and max_physical_batch_size < 1:
            raise ConfigError(f"trainer.privacy.max_physical_batch_size must be >= 1, got {max_physical_batch_size}")
        if secure_mode and importlib.util.find_spec("torchcsprng") is None:
            raise ConfigError(
                "trainer.privacy.secure_mode draws from Opacus' secure generator, which needs the torchcsprng package"
            )
        self.noise_multiplier = noise_multiplier
        self.max_grad_norm = max_grad_norm
        self.target_epsilon = target_epsilon
        self.target_delta = target_delta
        self.accountant = accountant
        self.max_physical_batch_size = max_physical_batch_size
        self.convert_batchnorm = convert_batchnorm
        self.secure_mode = secure_mode
        self.grad_sample_mode = grad_sample_mode
        self._private: WeakKeyDictionary[nn.Module, PrivateTraining] = WeakKeyDictionary()
        self.limits_budget = target_epsilon is not None
        self._planned_steps: dict[int, int] | None = None
        self._step_noise: dict[int, float] = {}  # budget mode: each client's noise per step
        self._epsilons: dict[int, float] = {}

    # ----------------------------------------------------------------- model

    def prepare(self, module: LightningModule, precision: str) -> LightningModule:
        from opacus.validators import ModuleValidator

        module = super().prepare(module, precision)
        has_batchnorm = any(isinstance(m, BATCH_NORMS) for m in module.modules())
        if has_batchnorm and not self.convert_batchnorm:
            raise ConfigError(
                f"DP-SGD cannot train {type(module).__name__}: BatchNorm mixes the examples of a batch, so per-example "
                "gradients do not exist; set trainer.privacy.init_args.convert_batchnorm: true to use GroupNorm instead"
            )
        if self.convert_batchnorm:
            convert_in_place(module)
        errors = ModuleValidator.validate(module, strict=False)
        if errors:
            raise ConfigError(f"DP-SGD cannot train {type(module).__name__}: {str(errors[0]).splitlines()[0]}")
        return module

    # ----------------------------------------------------------------- noise and accounting

    def setup(
        self, data: FederatedDataModule, clients_per_round: int, planned: Callable[[], Iterable[ClientPlan]]
    ) -> None:
        """Also refuses a noise multiplier whose round 1 alone takes one of its clients past ``target_epsilon``."""
        super().setup(data, clients_per_round, planned)
        if self.noise_multiplier is None or self.target_epsilon is None:
            return  # without a noise multiplier, each client's noise is set to spend its budget over the run
        first = takewhile(lambda plan: plan.round == 0, planned())
        epsilon, plan = max(((self.epsilon_after(plan), plan) for plan in first), key=itemgetter(0))
        if epsilon > self.target_epsilon:
            raise ConfigError(
                f"trainer.privacy.target_epsilon {self.target_epsilon:g} is spent by round 1 alone: client "
                f"{plan.client_id}'s {self.steps(plan)} steps of noise_multiplier {self.noise_multiplier:g} at sample "
                f"rate {self.schedule(plan.client_id)[0]:.4g} have epsilon {epsilon:.4g} (delta {self.target_delta:g}); "
                "raise trainer.privacy.noise_multiplier or target_epsilon, or lower trainer.local_epochs or local_steps"
            )

    def schedule(self, client_id: int) -> tuple[float, int]:
        """The client's Poisson sample rate and steps per epoch."""
        return poisson_schedule(self.data.client_size(client_id), self.data.batch_size)

    def sampler(self, client_id: int, generator: torch.Generator) -> UniformWithReplacementSampler:
        """The client's Poisson sampler (Opacus'), drawing from ``generator``."""
        from opacus.utils.uniform_sampler import UniformWithReplacementSampler

        size, rate = self.data.client_size(client_id), self.schedule(client_id)[0]
        return UniformWithReplacementSampler(num_samples=size, sample_rate=rate, generator=generator)

    def steps(self, plan: ClientPlan) -> int:
        return plan.steps if plan.steps is not None else cast(int, plan.epochs) * self.schedule(plan.client_id)[1]

    def step_noise(self, client_id: int, releases: int) -> float:
        """Noise multiplier of one step that releases ``releases`` private gradients of its batch."""
        from opacus.accountants.utils import get_noise_multiplier

        if self.noise_multiplier is not None:
            return self.noise_multiplier / math.sqrt(releases)
        if client_id not in self._step_noise:
            if self._planned_steps is None:
                self._planned_steps = {}
                for plan in self.planned():
                    self._planned_steps[plan.client_id] = self._planned_steps.get(plan.client_id, 0) + self.steps(plan)
            self._step_noise[client_id] = get_noise_multiplier(
                target_epsilon=self.target_epsilon,
                target_delta=self.target_delta,
                sample_rate=self.schedule(client_id)[0],
                steps=self._planned_steps[client_id],
                accountant=self.accountant,
            )
        return self._step_noise[client_id]

    def release_noise(self, client_id: int, releases: int) -> float:
        """Noise multiplier of each private gradient."""
        if self.noise_multiplier is not None:
            return self.noise_multiplier
        return self.step_noise(client_id, releases) * math.sqrt(releases)

    def epsilon(self, client_id: int) -> float:
        """The client's epsilon at ``target_delta`` so far (0 before it has trained)."""
        if client_id not in self._epsilons:
            state = self.client_states.get(client_id, STATE)
            self._epsilons[client_id] = 0.0 if state is None else self._spent(load_accountant(self.accountant, state))
        return self._epsilons[client_id]

    def _spent(self, accountant: IAccountant) -> float:
        return spent_epsilon(accountant, self.target_delta)

    def epsilon_after(self, plan: ClientPlan) -> float:
        """The client's epsilon at ``target_delta`` once it has trained ``plan``."""
        accountant = load_accountant(self.accountant, self.client_states.get(plan.client_id, STATE))
        noise = self.step_noise(plan.client_id, gradients_per_step(plan))
        compose(accountant, noise, self.schedule(plan.client_id)[0], self.steps(plan))
        return self._spent(accountant)

    def would_exceed(self, plan: ClientPlan) -> bool:
        return self.target_epsilon is not None and self.epsilon_after(plan) > self.target_epsilon

    def metrics(self, fabric: Fabric) -> dict[str, float]:
        """Max and mean of epsilon over the clients that have trained (each process holds its own clients')."""
        epsilons = torch.zeros(self.data.num_clients, dtype=torch.float64, device=fabric.device)
        for client_id in range(self.data.num_clients):
            if self.client_states.get(client_id, STATE) is not None:
                epsilons[client_id] = self.epsilon(client_id)
        epsilons = cast(Tensor, fabric.all_reduce(epsilons, reduce_op="sum"))
        trained = epsilons[epsilons > 0]
        if trained.numel() == 0:
            return {}
        return {"privacy/epsilon_max": float(trained.max()), "privacy/epsilon_mean": float(trained.mean())}

    def session(self, context: LocalContext, plan: ClientPlan, generator: torch.Generator) -> LocalSession:
        return DPSGDSession(self, context, plan, generator)

    def private_training(self, context: LocalContext) -> PrivateTraining:
        """The private module and optimizer of the client trainer of ``context``, made on its first client."""
        if context.module not in self._private:
            self._private[context.module] = PrivateTraining(self, context)
        return self._private[context.module]

    def save(self, client_id: int, accountant: IAccountant) -> None:
        self.client_states.set(client_id, STATE, accountant_state(accountant))
        self._epsilons[client_id] = self._spent(accountant)


class PrivateTraining:
    """One client trainer's module and optimizer made private once (Opacus' grad-sample hooks and ``DPOptimizer``, as
    ``make_private`` builds them) and reused by every client it trains; the hooks are off between clients."""

    def __init__(self, privacy: DPSGD, context: LocalContext) -> None:
        from opacus import PrivacyEngine
        from opacus.grad_sample.utils import prepare_module
        from opacus.optimizers import get_optimizer_class

        self.hooks = prepare_module(context.module, privacy.grad_sample_mode, wrap_model=False)
        self.hooks.forbid_grad_accumulation()  # Poisson batches are never accumulated
        self.hooks.disable_hooks()
        # secure mode: the sampling and the noise come from Opacus' cryptographically safe generator
        self.generator = PrivacyEngine(secure_mode=True).secure_rng if privacy.secure_mode else None
        optimizer_class = get_optimizer_class(clipping="flat", distributed=False, grad_sample_mode="hooks")
        self.optimizer = optimizer_class(
            context.optimizer,
            noise_multiplier=0.0,  # each client's, set by its session
            max_grad_norm=privacy.max_grad_norm,
            expected_batch_size=1,
            generator=self.generator,
            secure_mode=privacy.secure_mode,
        )


class DPSGDSession(LocalSession):
    """One client's DP-SGD on the client trainer's ``PrivateTraining``: its own accountant, noise and Poisson sampling
    (Opacus' ``UniformWithReplacementSampler``); each physical chunk's plain gradient comes from
    ``LocalSession.gradient``."""

    def __init__(self, privacy: DPSGD, context: LocalContext, plan: ClientPlan, generator: torch.Generator) -> None:
        super().__init__(context, plan, generator)
        self.privacy = privacy
        client_id = plan.client_id
        self.releases_per_step = gradients_per_step(plan)
        self.noise = privacy.release_noise(client_id, self.releases_per_step)
        self.sample_rate, _ = privacy.schedule(client_id)
        private = privacy.private_training(context)
        self.hooks, self.optimizer = private.hooks, private.optimizer
        self.sampler = privacy.sampler(client_id, private.generator or generator)
        self.optimizer.noise_multiplier = self.noise
        self.optimizer.expected_batch_size = expected_batch_size(self.sampler)
        self.accountant = load_accountant(privacy.accountant, privacy.client_states.get(client_id, STATE))
        self.releases = 0
        self.hooks.enable_hooks()

    def batches(self) -> Iterator[Batch]:
        return poisson_batches(self.context.data, self.plan, self.sampler, self.generator)

    def gradient(self, batch: Batch, batch_idx: int) -> Tensor:
        """Clipped, noised gradient of the Poisson batch, in physical chunks; the per-example gradients of every
        evaluation are cleared after it, so a second evaluation of the batch never sees those of the first."""
        size = extract_batch_size(batch)
        loss = torch.zeros((), device=self.context.flat.params.device)
        if size == 0:  # Poisson sampling drew nobody: the step releases noise only
            for p in self.optimizer.params:
                p.grad_sample = p.new_zeros((0, *p.shape))
            self.optimizer.pre_step()
        else:
            chunk_size = self.privacy.max_physical_batch_size or size
            starts = range(0, size, chunk_size)
            for i, start in enumerate(starts):
                chunk = apply_to_collection(batch, Tensor, itemgetter(slice(start, start + chunk_size)))
                self.optimizer.signal_skip_step(do_skip=i < len(starts) - 1)
                loss += super().gradient(chunk, batch_idx).detach() * extract_batch_size(chunk)
                if not self.optimizer.pre_step():
                    self.optimizer.zero_grad(set_to_none=True)  # keeps the accumulated clipped sum
            loss /= size
        self.releases += 1
        private = [p.grad for p in self.optimizer.params]
        self.optimizer.zero_grad(set_to_none=True)
        self.context.flat.zero_grad()  # the flat gradient views are the parameters' .grad again
        with torch.no_grad():
            for p, grad in zip(self.optimizer.params, private, strict=True):
                p.grad.copy_(grad)
        return loss

    def before_step(self, grad: Tensor) -> None:
        if self.releases == self.releases_per_step:
            noise = self.privacy.step_noise(self.plan.client_id, self.releases)
        else:
            noise = self.noise / math.sqrt(self.releases)
        compose(self.accountant, noise, self.sample_rate, 1)
        self.releases = 0

    def finish(self) -> None:
        self.hooks.disable_hooks()
        self.privacy.save(self.plan.client_id, self.accountant)
