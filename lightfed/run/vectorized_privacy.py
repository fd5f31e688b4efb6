"""DP-SGD of clients trained together (``VectorizedClients``): every client's per-example gradients at once, each
clipped, summed per client and noised as Opacus' ``DPOptimizer`` does for one client, from the client's own Poisson
batches, noise stream and accountant, as its ``DPSGDSession`` has them."""

import torch
from torch import Tensor

from lightfed.attacks.base import Attack
from lightfed.core.messages import ClientPlan
from lightfed.data.module import Batch, FederatedDataModule
from lightfed.privacy.accountant import STATE, compose, load_accountant
from lightfed.privacy.dp_sgd import DPSGD, expected_batch_size, poisson_batches


class PrivateClients:
    """The DP-SGD state of one chunk of clients, by position: their Poisson batches (drawn as each client's
    one-at-a-time training draws them, from a generator seeded with its plan's seed), the noise streams (the global
    generator a client seeds with its plan's seed, drawn per parameter in flat order as Opacus draws it), the
    divisors and the accountants."""

    def __init__(
        self,
        privacy: DPSGD,
        plans: list[ClientPlan],
        data: FederatedDataModule,
        shapes: list[torch.Size],
        attack: Attack,
        device: torch.device,
    ) -> None:
        self.privacy, self.plans, self.shapes = privacy, plans, shapes
        self.batches: list[list[Batch]] = []
        self.divisors, self.stds, self.noises, self.rates = [], [], [], []
        self.noise_streams = [torch.Generator(device).manual_seed(plan.seed) for plan in plans]
        self.accountants = [
            load_accountant(privacy.accountant, privacy.client_states.get(p.client_id, STATE)) for p in plans
        ]
        for plan in plans:
            generator = torch.Generator().manual_seed(plan.seed)
            sampler = privacy.sampler(plan.client_id, generator)
            self.batches.append(list(attack.batches(poisson_batches(data, plan, sampler, generator), plan)))
            self.divisors.append(expected_batch_size(sampler))
            self.stds.append(privacy.release_noise(plan.client_id, 1) * privacy.max_grad_norm)
            self.noises.append(privacy.step_noise(plan.client_id, 1))
            self.rates.append(sampler.sample_rate)

    def gradients(self, per_example: Tensor, sizes: list[int], active: list[int]) -> Tensor:
        """The private gradients ``(clients, d)`` of the clients ``active`` at this step from their examples'
        gradients ``per_example`` (a row per example, ``sizes[i]`` rows of ``active[i]`` after another): each
        example's clipped to ``max_grad_norm``, summed per client (in a fixed order: a GPU's ``index_add_`` would add
        them in any), plus the client's noise, over its expected batch size; one more step in each active client's
        accountant."""
        bound = self.privacy.max_grad_norm
        factors = (bound / (per_example.norm(dim=1) + 1e-6)).clamp(max=1.0)
        private = per_example.new_zeros(len(self.plans), per_example.shape[1])
        for k, clipped in zip(active, (per_example * factors.unsqueeze(1)).split(sizes), strict=True):
            private[k] = clipped.sum(0)
            if self.stds[k] > 0:
                draws = [
                    torch.normal(0.0, self.stds[k], s, generator=self.noise_streams[k], device=private.device)
                    for s in self.shapes
                ]
                private[k] += torch.cat([draw.flatten() for draw in draws])
            private[k] /= self.divisors[k]
            compose(self.accountants[k], self.noises[k], self.rates[k], 1)
        return private

    def finish(self) -> None:
        """Keeps each client's accountant (its epsilon) in the mechanism's per-client store."""
        for plan, accountant in zip(self.plans, self.accountants, strict=True):
            self.privacy.save(plan.client_id, accountant)
