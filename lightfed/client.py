"""Local training of the user's LightningModule on one client's data, through Fabric."""

from collections.abc import Mapping

import torch
from lightning import LightningModule
from lightning.fabric import Fabric
from torch import Tensor
from torch.optim import Optimizer

from lightfed.capture import LoggedValues
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError
from lightfed.flat import FlatModule
from lightfed.types import ClientPlan, ClientUpdate


def _single_optimizer(configured: object) -> Optimizer:
    """The optimizer from ``configure_optimizers``; schedulers and several optimizers are refused."""
    if isinstance(configured, Mapping) and set(configured) == {"optimizer"}:
        configured = configured["optimizer"]
    if isinstance(configured, (list, tuple)) and len(configured) == 1:
        configured = configured[0]
    if not isinstance(configured, Optimizer):
        raise ConfigError(
            "configure_optimizers must return one torch optimizer for federated clients "
            f"(learning-rate schedules are set by the strategy), got {type(configured).__name__}"
        )
    return configured


class ClientTrainer:
    """Trains the process's one live module for one client at a time.

    Global weights are copied into the module in place; the optimizer is built once and its state reset per client,
    which is what a freshly built optimizer would start from.
    """

    def __init__(self, fabric: Fabric, module: LightningModule, data: FederatedDataModule) -> None:
        self.fabric = fabric
        self.module = fabric.strategy.precision.convert_module(module)
        self.data = data
        self.flat = FlatModule(self.module, fabric.device)
        optimizer = _single_optimizer(module.configure_optimizers())
        self._initial_groups = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
        self.optimizer = fabric.setup_optimizers(optimizer)
        self.delta = torch.empty_like(self.flat.params)
        self._scaler = getattr(fabric.strategy.precision, "scaler", None)  # set under 16-mixed
        self.logged = LoggedValues()

    def train(self, plan: ClientPlan, params: Tensor, buffers: Tensor) -> ClientUpdate:
        """Runs the plan from the given global weights; randomness comes only from ``plan.seed``."""
        self.flat.load(params, buffers)
        self._reset_optimizer(plan.lr)
        rule = plan.rule
        if rule is not None:
            rule.start(params, self)
        torch.manual_seed(plan.seed)  # dropout and other in-model randomness
        generator = torch.Generator().manual_seed(plan.seed)
        module, optimizer = self.module, self.optimizer
        module.train()
        loss_sum = torch.zeros((), device=self.fabric.device)
        steps, local_time = 0, 0.0
        with self.logged.attached(module):
            for batch in self.data.client_batches(plan.client_id, generator, plan.epochs, plan.steps):
                self.logged.batch_size = len(batch[1])
                self.batch, self.step_index = batch, steps
                loss = self.recompute_gradient()
                if rule is not None:
                    if self._scaler is not None:
                        self._scaler.unscale_(optimizer.optimizer)  # the rule works on true gradients
                    rule.adjust(self.flat.grads, self.flat.params)
                if rule is None or not rule.takes_step:
                    optimizer.step()
                loss_sum += loss.detach()
                local_time += optimizer.param_groups[0]["lr"]
                steps += 1
        torch.sub(self.flat.params, params, out=self.delta)
        return ClientUpdate(
            client_id=plan.client_id,
            delta=self.delta,
            buffers=self.flat.buffers,
            num_examples=self.data.client_size(plan.client_id),
            num_steps=steps,
            local_time=local_time,
            train_loss=loss_sum / max(steps, 1),
            report={} if rule is None else rule.report(),
        )

    def recompute_gradient(self) -> Tensor:
        """Loss and flat gradient (``flat.grads``) of the current batch at the current parameters; returns the loss.

        Local rules that need more than one gradient per step (step-size control, sharpness-aware steps) call it.
        """
        with self.fabric.autocast():
            output = self.module.training_step(self.batch, self.step_index)
        loss = output["loss"] if isinstance(output, Mapping) else output
        self.flat.zero_grad()
        self.fabric.backward(loss)
        return loss

    def _reset_optimizer(self, lr: float | None) -> None:
        self.optimizer.state.clear()
        for group, initial in zip(self.optimizer.param_groups, self._initial_groups):
            group.update(initial)
            if lr is not None:
                group["lr"] = lr
