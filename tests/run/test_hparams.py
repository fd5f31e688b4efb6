"""The HPARAMS tab as TensorBoard builds it from two runs' event files: the settings that tell runs apart first, the
strategy and the seed among the first columns, each strategy's own settings (the union over the runs), and the test
metrics among the metrics."""

from tensorboard import context
from tensorboard.backend.event_processing.data_provider import MultiplexerDataProvider
from tensorboard.backend.event_processing.plugin_event_multiplexer import EventMultiplexer
from tensorboard.plugins.base_plugin import TBContext
from tensorboard.plugins.hparams.backend_context import Context

from lightfed.cli import run
from lightfed.run.hparams import summary_hparams
from tests.conftest import trainer_options
from tests.test_run_identity import TINY


def _hparams_tab(logdir: str) -> tuple[list[str], list[str]]:
    """The columns and the metrics of TensorBoard's HPARAMS tab for the runs under ``logdir``, in its order."""
    multiplexer = EventMultiplexer()
    multiplexer.AddRunsFromDirectory(logdir)
    multiplexer.Reload()
    tab = Context(
        TBContext(logdir=logdir, multiplexer=multiplexer, data_provider=MultiplexerDataProvider(multiplexer, logdir))
    )
    request = context.RequestContext()
    experiment = tab.experiment_from_metadata(
        request, "", True, tab.hparams_metadata(request, ""), tab.hparams_from_data_provider(request, "", 0)
    )
    return [info.name for info in experiment.hparam_infos], [info.name.tag for info in experiment.metric_infos]


def test_two_strategies_compared_show_what_differs_first_with_the_test_metrics(tmp_path):
    config = tmp_path / "tiny.yaml"
    config.write_text(TINY.replace("logger: false", "logger: true"))
    for strategy in ("FedAvg", "FedProx"):
        run(
            [
                "fit",
                "--config",
                str(config),
                *trainer_options(root_dir=str(tmp_path / "runs"), name=strategy),
                "--strategy",
                f"lightfed.strategies.{strategy}",
            ]
        )
    columns, metrics = _hparams_tab(str(tmp_path / "runs"))
    assert columns[:2] == ["Run", "Strategy"]  # the settings that differ, capitalized summary first
    assert {"Seed", "LR", "Clients"} <= set(columns[:10]) and "Strategy/mu" in columns
    assert {"~final/test_acc", "~final/best_test_acc", "curves/val_acc"} <= set(metrics)
    multiplexer = EventMultiplexer()
    multiplexer.AddRunsFromDirectory(str(tmp_path / "runs" / "FedAvg"))
    multiplexer.Reload()
    for tag in _time_series_opened(multiplexer):  # every card of the groups it opens is a per-round curve
        assert len(multiplexer.Tensors(next(iter(multiplexer.Runs())), tag)) == 2, tag


def _time_series_opened(multiplexer: EventMultiplexer) -> list[str]:
    """The scalar tags of the groups TensorBoard's Time Series tab opens: tags sorted, grouped by their first part,
    the first two groups expanded."""
    tags = sorted({tag for run in multiplexer.Runs().values() for tag in run["tensors"] if "_hparams_" not in tag})
    groups = list(dict.fromkeys(tag.split("/", 1)[0] for tag in tags))
    return [tag for tag in tags if tag.split("/", 1)[0] in groups[:2]]


def test_the_summary_columns_of_a_config():
    config = {
        "seed_everything": 3,
        "trainer": {"name": "x", "clients_per_round": 5},
        "model": {
            "class_path": "m.M",
            "init_args": {"optimizer": {"class_path": "torch.optim.SGD", "init_args": {"lr": 0.1}}},
        },
        "data": {"partitioner": {"class_path": "p.P", "init_args": {"num_clients": 20, "alpha": 0.3}}},
        "strategy": {"class_path": "lightfed.strategies.FedProx", "init_args": {"mu": 0.1}},
    }
    assert summary_hparams(config) == {
        "Run": "x",
        "Seed": 3,
        "Strategy": "FedProx",
        "Strategy/mu": 0.1,
        "LR": 0.1,
        "Alpha": 0.3,
        "Clients": 20,
        "Clients per round": 5,
    }
    assert summary_hparams({"seed": 0, "rounds": 3}) == {"Seed": 0}  # a run from Python records only these
