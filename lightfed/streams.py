"""Every random stream of a run, in one registry: each is derived from the run's seed and a key, never drawn from a
global generator, so a run's draws are the same on any number of processes and after a resume."""

from enum import IntEnum, unique


@unique
class Stream(IntEnum):
    """The first element of a stream's key for ``lightfed.core.seeding.derived_rng``/``derived_seed``; round and
    client ids (and a mechanism's own sub-keys) follow it."""

    SAMPLING = 0  # the server's choice of clients in a round
    CLIENT = 1  # one client's local training in a round
    LOCAL_WORK = 2  # a client's local epochs, steps and learning rate
    PERSONAL_STEPS = 3  # Ditto's personal steps of a client
    FINETUNE = 4  # per-client evaluation's fine-tuning steps
    EVALUATED = 5  # the clients per-client evaluation covers
    USER_LEVEL_DP = 30  # user-level DP: central noise, Poisson sampling, clients' noise shares (``UserLevelKey``)
    SECURE_AGGREGATION = 31  # secure aggregation: graph, dropouts, masks, rounding (``SecureAggregationKey``)
    QUANTIZATION = 32  # a stochastic quantizer's rounding of one client's update in a round (QSGD)
    CANARIES = 40  # the privacy audit's canaries: (CANARIES, 0, round) their insertions, (CANARIES, 1) directions
    SHADOW_HALVES = 41  # the privacy audit's shadow runs: the halves of the clients each pair silences
    DISPATCH = 100  # asynchronous FL: the server's choice of idle clients to start after an aggregation
    DELAY_TRAITS = 101  # asynchronous FL: each client's fixed delay traits (e.g. its speed tier)
    DELAY = 102  # asynchronous FL: the duration of one job
    WARM_UP = 103  # asynchronous FL: the clients' warm-up jobs before the first aggregation


@unique
class UserLevelKey(IntEnum):
    """The second element of a ``Stream.USER_LEVEL_DP`` key."""

    CENTRAL_NOISE = 0
    POISSON = 1
    CLIENT_NOISE = 2


@unique
class SecureAggregationKey(IntEnum):
    """The second element of a ``Stream.SECURE_AGGREGATION`` key."""

    GRAPH = 0
    DROPOUT = 1
    PAIR = 2
    SELF = 3
    ROUNDING = 4


@unique
class DataStream(IntEnum):
    """The data's own streams, ``numpy.random.default_rng([seed, key])`` beside the partitioner's."""

    VALIDATION = 1  # the held-out validation shares
    EVALUATED_SAMPLE = 2  # the evaluated sample of a large dataset
    TEST = 3  # a Hugging Face dataset's held-out test set
