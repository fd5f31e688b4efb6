"""The circuit family: FedECADO and Adaptive FedECADO, their server solve, curvature estimates and client rules."""
