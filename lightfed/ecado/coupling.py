"""FedECADO's client side: local steps driven by the client's coupling current, and a curvature estimate on demand."""

from typing import Any, Literal

import torch
from torch import Tensor

from lightfed.core.local_context import LocalContext
from lightfed.core.requirements import Requirements, Sent
from lightfed.ecado.curvature import ClientCurvature, CurvatureEstimate
from lightfed.ecado.speed_decay import SpeedDecay
from lightfed.local.correction import GradientCorrection

CouplingScale = Literal["data_size", "unit"]


class CouplingCurrent(GradientCorrection):
    """Every local step descends grad - beta I_i^k: x <- x - lr (grad - beta I), one Forward-Euler step of length
    beta lr of the client ODE dx/dt = I - (1 / beta) grad F_i.

    ``scale="data_size"``: beta = B / |D_i| (batch size over client size), so that the circuit's fixed point is the
    data-weighted optimum sum_i |D_i| grad F_i = 0 and a full epoch lasts lr, as the paper's T_i = e_i lr_i.
    ``scale="unit"``: beta = 1, the paper's Algorithm 2 literally; its fixed point weighs every client equally.

    With ``curvature_batches > 0`` the client also estimates its Hessian diagonal, reported as ``curvature``: at the
    global model before training (``curvature_estimate="hutchinson"``: ``curvature_probes`` probes on that many of its
    batches, or on random subsets of ``curvature_examples`` examples), or from its training steps' own gradients
    (``"squared_gradients"``, ``SquaredGradients``: no extra pass). With
    ``track_decay`` it also reports how its speed decayed over the window (``decay``, see ``SpeedDecay``).
    """

    requirements = Requirements(
        sends=frozenset(
            {
                Sent("time_scale", "size"),
                Sent("curvature", "data", removed_by="strategy.curvature: none"),
                Sent("decay", "gradients"),
            }
        )
    )

    def __init__(
        self,
        client_id: int,
        current: Tensor,
        scale: CouplingScale = "data_size",
        curvature_batches: int = 0,
        curvature_probes: int = 8,
        seed: int = 0,
        track_decay: bool = False,
        curvature_examples: int | None = None,
        curvature_estimate: CurvatureEstimate = "hutchinson",
    ) -> None:
        super().__init__(current)
        self.decay = SpeedDecay() if track_decay else None
        self.client_id = client_id
        self.scale = scale
        self.curvature = ClientCurvature(
            curvature_batches, curvature_probes, curvature_examples, curvature_estimate, seed
        )

    def start(self, params: Tensor, context: LocalContext) -> None:
        data = context.data
        self.beta = data.batch_size / data.client_size(self.client_id) if self.scale == "data_size" else 1.0
        self.vector, self.factor = self.vector.to(params.device), -self.beta  # no scaled copy: one op a step
        self.context = context
        self.curvature.start(context, self.client_id)

    def adjust(self, grad: Tensor, params: Tensor) -> None:
        self.curvature.observe(grad)  # the step's gradient at its start, before any trial or correction
        super().adjust(grad, params)
        if self.decay is not None:  # the corrected gradient is -beta x the ODE's velocity; the step lasts beta lr
            speed = torch.linalg.vector_norm(grad)  # read only for the first and the last step: no wait on a GPU
            self.decay.observe(lambda: float(speed), self.beta * self.context.lr)

    def report(self) -> dict[str, Any]:
        """``time_scale``: beta (the client's window is beta x its summed learning rates); ``curvature`` if estimated;
        ``decay`` if tracked."""
        report: dict[str, Any] = {"time_scale": self.beta}
        if self.decay is not None:
            report["decay"] = self.decay.ratio()
        curvature = self.curvature.result()
        if curvature is not None:
            report["curvature"] = curvature
        return report
