"""Errors that tell the user what to change; the CLI prints them as one line."""


class LightfedError(Exception):
    """Base class of the errors lightfed reports to the user without a traceback.

    The ``lightfed`` command prints one as ``lightfed: error: <message>`` and exits with status 2. Catch it to handle
    every such error of a script in one place.

    Examples:
        >>> from lightfed import LightfedError, LocalTraining
        >>> try:
        ...     LocalTraining(gradient_clip_algorithm="max")
        ... except LightfedError as error:
        ...     print(f"lightfed: error: {error}")
        lightfed: error: trainer.gradient_clip_algorithm must be 'norm' or 'value', got 'max'
    """


class ConfigError(LightfedError, ValueError):
    """A setting is invalid or two settings do not fit together.

    The message names the key to change (``trainer.<key>``, ``strategy.<key>``, ...).

    Examples:
        >>> from lightfed import Processes
        >>> Processes(precision="fp16")
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: trainer.precision must be one of 32-true, 16-mixed, bf16-mixed, got 'fp16'
    """


class DatasetNotFoundError(LightfedError, FileNotFoundError):
    """Dataset files are missing and downloading is off.

    Examples:
        >>> import tempfile
        >>> from lightfed import DatasetNotFoundError
        >>> from lightfed.data import MNIST
        >>> with tempfile.TemporaryDirectory() as empty:
        ...     try:
        ...         MNIST(root=empty, download=False).load(seed=0)
        ...     except DatasetNotFoundError as error:
        ...         print(str(error).split(" (")[0].replace(empty, "<root>"))
        MNIST files missing or corrupted in <root>/MNIST/raw
    """


class DivergenceError(LightfedError, RuntimeError):
    """The global model became NaN or Inf.

    The message names a client whose training examples hold NaN or Inf, or else tells to lower the learning rate.

    Examples:
        >>> from lightfed import DivergenceError, LightfedError
        >>> issubclass(DivergenceError, LightfedError), issubclass(DivergenceError, RuntimeError)
        (True, True)
    """


class CheckpointWriteError(LightfedError, OSError):
    """A checkpoint could not be written (a full disk); the checkpoints written before it are intact."""
