"""Local training of the user's LightningModule on one client's data, through Fabric."""

import inspect
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, nullcontext
from typing import Any, cast

import torch
from lightning import LightningModule
from lightning.fabric import Fabric
from lightning.fabric.plugins import Precision
from lightning.fabric.strategies import DeepSpeedStrategy, Strategy
from torch import Tensor
from torch.optim import Optimizer

from lightfed.attacks.base import NO_ATTACK, Attack
from lightfed.core.flat import FlatModule
from lightfed.core.local_context import LocalContext
from lightfed.core.logged_values import LoggedValues
from lightfed.core.messages import ClientPlan, ClientUpdate
from lightfed.core.workspace import Workspace
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError
from lightfed.optim.sam import SAM
from lightfed.privacy.base import NO_PRIVACY, ClientPrivacy
from lightfed.run.settings import LocalTraining
from lightfed.run.trainer_view import TrainerView


def configured_optimizer(module: LightningModule) -> Optimizer:
    """The one optimizer ``module.configure_optimizers`` builds; a setting it refuses (torch's optimizers raise
    ValueError for a negative or NaN learning rate) is a one-line ``ConfigError`` naming the module."""
    try:
        optimizer = single_optimizer(module.configure_optimizers())
    except (ValueError, TypeError) as error:
        if isinstance(error, ConfigError):
            raise
        raise ConfigError(f"{type(module).__name__}.configure_optimizers: {type(error).__name__}: {error}") from error
    rates = [group["lr"] for group in optimizer.param_groups if "lr" in group]
    if not all(torch.isfinite(torch.as_tensor(rate)).all() for rate in rates):
        raise ConfigError(
            f"{type(module).__name__}.configure_optimizers: the learning rate must be a number, got {rates}"
        )
    return optimizer


def single_optimizer(configured: object) -> Optimizer:
    """The optimizer from ``configure_optimizers``; schedulers and several optimizers are refused."""
    if isinstance(configured, Mapping) and set(configured) == {"optimizer"}:
        configured = configured["optimizer"]
    if isinstance(configured, (list, tuple)) and len(configured) == 1:
        configured = configured[0]
    if not isinstance(configured, Optimizer):
        raise ConfigError(
            "configure_optimizers must return one torch optimizer for federated clients (a learning-rate schedule "
            f"over rounds is trainer.lr_schedule), got {type(configured).__name__}"
        )
    return configured


class ClientTrainer:
    """Trains the process's one live module for one client at a time.

    Global weights are copied into the module in place; the optimizer is built once and its state reset per client,
    which is what a freshly built optimizer would start from. Each client's training runs in a ``LocalSession``: plain
    gradients of shuffled batches, or with ``privacy`` the mechanism's session (its batches, its private gradients,
    its hook before each step). Local rules and sessions see the trainer only through its ``LocalContext``.

    The module's hooks run at the matching points of a client's training (the table in docs/guides/model-and-data.md)
    and ``self.trainer`` is a ``TrainerView``. Of the ``local`` settings, ``lr_schedule`` scales each round's learning
    rate (over ``rounds``) and ``gradient_clip_val`` clips each step's final gradient (after the rule and privacy,
    before the optimizer step) by its norm or by value.
    An ``attack`` changes the batches of its malicious clients (what they send: the attack is the run's first transform).
    """

    def __init__(
        self,
        fabric: Fabric,
        module: LightningModule,
        data: FederatedDataModule,
        privacy: ClientPrivacy = NO_PRIVACY,
        local: LocalTraining | None = None,
        rounds: int = 1,
        attack: Attack = NO_ATTACK,
    ) -> None:
        local = local or LocalTraining()
        self.fabric, self.attack = fabric, attack
        self.lr_schedule, self.rounds = local.lr_schedule, rounds
        self.gradient_clip_val, self.gradient_clip_algorithm = local.gradient_clip_val, local.gradient_clip_algorithm
        self.view = TrainerView(fabric)
        module.trainer = self.view  # type: ignore[assignment]  # what a module reads of its trainer, and no more
        self.module = cast(LightningModule, fabric.strategy.precision.convert_module(module))
        self.data = data
        self.flat = FlatModule(self.module, fabric.device)
        optimizer = configured_optimizer(module)
        self._initial_groups = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
        wrapped = fabric.setup_optimizers(optimizer)
        assert not isinstance(wrapped, tuple)  # one optimizer in, one out
        self.optimizer = wrapped
        self.delta = torch.empty_like(self.flat.params)
        self._scaler = getattr(fabric.strategy.precision, "scaler", None)  # set under 16-mixed
        self.privacy = privacy
        if not isinstance(optimizer, SAM) and _needs_closure(optimizer):
            raise ConfigError(
                f"the model's optimizer {type(optimizer).__name__} evaluates the loss itself in each step (a closure), "
                "which a client's steps do not give: use one that steps on the batch's gradient (SGD, Adam, ...)"
            )
        self._sam_closure = self._gradient if isinstance(optimizer, SAM) else None  # SAM re-evaluates the batch
        if self._sam_closure is not None and (privacy.private or self.scales_gradients):
            raise ConfigError(
                "a SAM optimizer needs trainer.precision 32-true or bf16-mixed and no trainer.privacy; under "
                "differential privacy use strategy FedSAM or FedASAM, whose rule makes both gradients private"
            )
        self.logged = LoggedValues()
        self._device, self._generator = fabric.device, torch.Generator()
        plain = plain_precision(fabric)
        self._context = LocalContext(
            module=self.module,
            flat=self.flat,
            optimizer=optimizer,
            data=data,
            scales_gradients=self.scales_gradients,
            autocast=nullcontext if plain else fabric.autocast,
            backward=_loss_backward if plain else fabric.backward,
            recompute_gradient=self._recompute_gradient,
            workspace=Workspace(),
        )

    @property
    def context(self) -> LocalContext:
        """What the client's local rules see of it (``LocalRule.start``)."""
        return self._context

    def prepare(self, plan: ClientPlan, params: Tensor, buffers: Tensor) -> None:
        """The live module at ``params``/``buffers`` and the optimizer set for ``plan``: what the plan's rule sees in
        ``start`` (a curvature estimate at the received model, the step size, ...)."""
        self.flat.load(params, buffers)
        self._reset_optimizer(plan)

    def train(self, plan: ClientPlan, params: Tensor, buffers: Tensor) -> ClientUpdate:
        """Runs the plan from the given global weights; randomness comes only from ``plan.seed``."""
        self.prepare(plan, params, buffers)
        self._rule = rule = plan.rule
        context = self._context
        if rule is not None:
            rule.start(params, context)
        torch.default_generator.manual_seed(plan.seed)  # dropout, DP noise and other draws from torch's global RNG
        if self._device.type == "cuda":  # (``torch.manual_seed`` queues a call per client while CUDA is unused)
            torch.cuda.manual_seed(plan.seed)
        self.last_seed = plan.seed
        generator = self._generator.manual_seed(plan.seed)  # the client's batches and its session's draws
        module, optimizer, view, logged, grads = self.module, self.optimizer, self.view, self.logged, self.flat.grads
        torch_optimizer = optimizer.optimizer
        if not module.training:  # an evaluation left it in eval mode (Lightning, too, switches modes per stage)
            module.train()
        session = self.privacy.session(context, plan, generator)
        self._session = session
        loss_sum = torch.zeros((), device=self._device)
        size = self.data.client_size(plan.client_id)
        steps, local_time, per_epoch = 0, 0.0, self.data.batches_of(size)
        view._enter("train", plan.round, plan.client_id)
        with logged.attached(module):
            module.on_train_start()
            for batch in self.attack.batches(session.batches(), plan):
                if steps % per_epoch == 0:
                    view._epoch = steps // per_epoch
                    module.on_train_epoch_start()
                logged.batch = batch
                module.on_train_batch_start(batch, steps)
                self._batch, self._batch_idx = batch, steps
                loss = session.gradient(batch, steps) if rule is None else self._gradient()
                session.before_step(grads)
                module.on_before_optimizer_step(torch_optimizer)
                self._clip_gradient()
                if rule is not None:
                    rule.observe(grads)
                if rule is None or not rule.takes_step:
                    optimizer.step(self._sam_closure)
                loss_sum += loss.detach()
                local_time += context.lr
                steps += 1
                view._step = steps
                module.on_train_batch_end(loss, batch, steps - 1)
                if steps % per_epoch == 0:
                    module.on_train_epoch_end()
            if steps % per_epoch:  # a last, partial pass (local_steps)
                module.on_train_epoch_end()
            module.on_train_end()
        session.finish()
        view._enter("")
        torch.sub(self.flat.params, params, out=self.delta)
        return ClientUpdate(
            client_id=plan.client_id,
            delta=self.delta,
            buffers=self.flat.buffers,
            num_examples=size,
            num_steps=steps,
            local_time=local_time,
            train_loss=loss_sum / max(steps, 1),
            report={} if rule is None else rule.report(),
        )

    @contextmanager
    def unrecorded(self) -> Iterator[None]:
        """Training that keeps nothing the module logs (evaluation after fine-tuning), as a benign client: a simulated
        attack changes what clients send, not what is measured."""
        (logged, self.logged), (attack, self.attack) = (self.logged, LoggedValues()), (self.attack, NO_ATTACK)
        try:
            yield
        finally:
            self.logged, self.attack = logged, attack

    def fine_tuned(self, plan: ClientPlan, params: Tensor, buffers: Tensor) -> tuple[Tensor, Tensor]:
        """The weights after training ``plan`` from ``params``/``buffers``, ``unrecorded``."""
        with self.unrecorded():
            update = self.train(plan, params, buffers)
        return params + update.delta, update.buffers.clone()

    @property
    def scales_gradients(self) -> bool:
        """Whether gradients are loss-scaled (16-bit mixed precision) until the optimizer step unscales them."""
        return self._scaler is not None

    def _recompute_gradient(self) -> Tensor:
        """Loss and flat gradient (``flat.grads``) of the current batch at the current parameters, through the session
        (private under privacy); returns the loss."""
        return self._session.gradient(self._batch, self._batch_idx)

    def _gradient(self) -> Tensor:
        """The step's gradient: the batch's (private under privacy), then changed by the plan's rule."""
        loss = self._recompute_gradient()
        if self._rule is not None:
            if self._scaler is not None:
                self._scaler.unscale_(self.optimizer.optimizer)  # the rule works on true gradients
            self._rule.adjust(self.flat.grads, self.flat.params)
        return loss

    def _clip_gradient(self) -> None:
        """Clips the step's gradient as Lightning's ``gradient_clip_val`` does (true gradients under 16-mixed)."""
        if self.gradient_clip_val is None:
            return
        if self._scaler is not None and self._rule is None:  # with a rule, ``_gradient`` has unscaled them
            self._scaler.unscale_(self.optimizer.optimizer)
        if self.gradient_clip_algorithm == "norm":
            torch.nn.utils.clip_grad_norm_(self.module.parameters(), self.gradient_clip_val)
        else:
            torch.nn.utils.clip_grad_value_(self.module.parameters(), self.gradient_clip_val)

    def _reset_optimizer(self, plan: ClientPlan) -> None:
        """Fresh optimizer state with the plan's settings (``group_settings``)."""
        self.optimizer.state.clear()
        for group, settings in zip(self.optimizer.param_groups, self.group_settings(plan), strict=True):
            group.update(settings)

    def group_settings(self, plan: ClientPlan) -> list[dict[str, Any]]:
        """Each optimizer group's settings for ``plan``: the optimizer's own, at the plan's learning rate (or the
        optimizer's) x the round's schedule factor."""
        factor = 1.0 if self.lr_schedule is None else self.lr_schedule.factor(plan.round, self.rounds)
        return [
            {**initial, "lr": (initial["lr"] if plan.lr is None else plan.lr) * factor}
            for initial in self._initial_groups
        ]


def plain_precision(fabric: Fabric) -> bool:
    """Whether ``fabric.autocast()`` is ``nullcontext()`` and ``fabric.backward(loss)`` no more than ``loss.backward()``:
    the forward context and backward pass of Fabric's base strategy and precision (none that casts, scales the loss or
    runs an engine of its own)."""
    strategy, precision = fabric.strategy, fabric.strategy.precision
    return (
        not isinstance(strategy, DeepSpeedStrategy)
        and type(strategy).backward is Strategy.backward
        and all(getattr(type(precision), name) is getattr(Precision, name) for name in PRECISION_CALLS)
    )


PRECISION_CALLS = ("forward_context", "pre_backward", "backward", "post_backward")  # of Fabric.autocast and backward


def _loss_backward(loss: Tensor) -> None:
    loss.backward()


def _needs_closure(optimizer: Optimizer) -> bool:
    """Whether ``optimizer.step`` cannot be called without a closure (``torch.optim.LBFGS``)."""
    closure = inspect.signature(optimizer.step).parameters.get("closure")
    return closure is not None and closure.default is inspect.Parameter.empty
