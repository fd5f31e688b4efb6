"""Errors that tell the user what to change; the CLI prints them as one line."""


class LightfedError(Exception):
    """Base class of the errors lightfed reports to the user without a traceback."""


class ConfigError(LightfedError, ValueError):
    """A setting is invalid or two settings do not fit together."""


class DatasetNotFoundError(LightfedError, FileNotFoundError):
    """Dataset files are missing and downloading is off."""


class DivergenceError(LightfedError, RuntimeError):
    """The global model became NaN or Inf."""


class CheckpointWriteError(LightfedError, OSError):
    """A checkpoint could not be written (a full disk); the checkpoints written before it are intact."""
