"""lightfed.data.HuggingFace on tiny local datasets shaped like the hub's FEMNIST, Shakespeare and CIFAR-10."""

import json
import shutil
import subprocess
from functools import partial
from pathlib import Path

import numpy as np
import pytest
import torch

from lightfed.cli import run
from lightfed.data import DirichletPartitioner, HuggingFace, NaturalIdPartitioner
from lightfed.data.hf_transforms import LEAF_CHARACTERS, next_characters
from lightfed.data.module import FederatedDataModule
from lightfed.errors import ConfigError
from lightfed.models import MLP
from lightfed.strategies import FedAvg
from tests.conftest import refusal_lines, small_trainer, trainer_options

datasets = pytest.importorskip("datasets")
PIL = pytest.importorskip("PIL.Image")

ROOT = Path(__file__).resolve().parents[2]
CPU = torch.device("cpu")
WRITERS = [f"f{w:04d}" for w in (7, 3, 11, 5)]  # out of order, as on the hub


def femnist_like(num: int = 240, size: int = 8) -> "datasets.Dataset":
    """Grey PIL images, a writer id per row (rows of a writer interleaved), a ClassLabel of 4 classes."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, num)
    images = [PIL.fromarray((rng.random((size, size)) * 60 + 60 * label).astype(np.uint8)) for label in labels]
    features = datasets.Features(
        {
            "image": datasets.Image(),
            "writer_id": datasets.Value("string"),
            "character": datasets.ClassLabel(names=list("abcd")),
        }
    )
    writers = [WRITERS[i % 4] for i in range(num)]
    return datasets.Dataset.from_dict({"image": images, "writer_id": writers, "character": labels.tolist()}, features)


@pytest.fixture(scope="module")
def saved_femnist(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("femnist") / "saved"
    femnist_like().save_to_disk(str(folder))
    return folder


def test_a_saved_dataset_splits_by_writer_and_holds_out_each_writers_test_share(saved_femnist):
    source = HuggingFace(
        str(saved_femnist),
        inputs="image",
        label="character",
        client_id="writer_id",
        test_split=None,
        test_fraction=0.25,
    )
    data = FederatedDataModule(source, NaturalIdPartitioner(), batch_size=8, val_fraction=0.0)
    data.setup(seed=0, device=CPU)
    splits = source.load(0)
    assert len(splits.train) == 180 and len(splits.test) == 60 and splits.num_classes == 4
    # client k holds the writer k-th in sorted order, 45 of its 60 rows (15 held out as test rows)
    assert [data.client_size(k) for k in range(4)] == [45] * 4
    assert sorted(set(splits.train_client_ids.tolist())) == [0, 1, 2, 3]
    x, y = splits.train[0]
    assert x.shape == (1, 8, 8) and x.dtype == torch.float32 and 0 <= float(x.min()) and float(x.max()) <= 1
    assert y.dtype == torch.int64


def test_the_femnist_config_trains_from_a_local_saved_dataset(saved_femnist, tmp_path):
    metrics = run(
        [
            "fit",
            "--config",
            str(ROOT / "configs" / "hf" / "femnist.yaml"),
            "--data.dataset.init_args.path",
            str(saved_femnist),
            "--model.init_args.num_classes",
            "4",
            *trainer_options(
                rounds=2, clients_per_round=4, accelerator="cpu", root_dir=str(tmp_path), progress_bar="false"
            ),
        ]
    )
    assert metrics["round/clients"] == 4 and np.isfinite(metrics["val_loss"])


def test_local_parquet_files_train_with_a_dirichlet_split(tmp_path):
    """CIFAR-10's shape on the hub (img, label; train and test splits) as parquet files."""
    whole = femnist_like(300).rename_columns({"image": "img", "character": "label"}).remove_columns("writer_id")
    whole.select(range(240)).to_parquet(str(tmp_path / "train.parquet"))
    whole.select(range(240, 300)).to_parquet(str(tmp_path / "test.parquet"))
    metrics = run(
        [
            "fit",
            "--config",
            str(ROOT / "configs" / "hf" / "cifar10.yaml"),
            "--data.dataset.init_args.path",
            "parquet",
            "--data.dataset.init_args.data_files",
            f"{{train: {tmp_path / 'train.parquet'}, test: {tmp_path / 'test.parquet'}}}",
            "--model",
            "lightfed.models.SmallCNN",
            "--model.num_classes",
            "4",
            "--data.augmentation",
            "null",
            "--data.partitioner.init_args.num_clients",
            "4",
            "--data.partitioner.init_args.min_size",
            "5",
            *trainer_options(
                rounds=2,
                clients_per_round=4,
                local_epochs=1,
                accelerator="cpu",
                root_dir=str(tmp_path),
                progress_bar="false",
            ),
        ]
    )
    assert metrics["round/clients"] == 4 and np.isfinite(metrics["val_loss"])
    splits = HuggingFace(
        "parquet",
        data_files={"train": str(tmp_path / "train.parquet"), "test": str(tmp_path / "test.parquet")},
        inputs="img",
    ).load(0)
    assert len(splits.train) == 240 and len(splits.test) == 60
    assert splits.train_labels.tolist() == whole["label"][:240]


def test_the_shakespeare_config_trains_on_next_characters(tmp_path):
    rng = np.random.default_rng(0)
    roles = ["HAMLET", "OPHELIA", "GHOST"]
    text = "".join(rng.choice(list("abc de"), 2000))
    rows = {
        "character_id": [roles[i % 3] for i in range(90)],
        "x": [text[i : i + 80] for i in range(90)],
        "y": [text[i + 80] for i in range(90)],
    }
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "shakespeare"))
    example = next_characters({"x": rows["x"][0], "y": rows["y"][0]})
    assert example["tokens"].shape == example["targets"].shape == (80,)
    assert LEAF_CHARACTERS[int(example["targets"][-1])] == rows["y"][0]
    assert torch.equal(example["tokens"][1:], example["targets"][:-1])
    metrics = run(
        [
            "fit",
            "--config",
            str(ROOT / "configs" / "hf" / "shakespeare.yaml"),
            "--data.dataset.init_args.path",
            str(tmp_path / "shakespeare"),
            "--model.init_args.hidden_size",
            "8",
            "--model.init_args.num_layers",
            "1",
            *trainer_options(
                rounds=1, clients_per_round=3, accelerator="cpu", root_dir=str(tmp_path), progress_bar="false"
            ),
        ]
    )
    assert metrics["round/clients"] == 3 and np.isfinite(metrics["val_loss"])


def test_a_writer_is_the_same_client_in_train_and_test(tmp_path):
    """As Flower's issue #5243 asks: the test split lists its writers in another order and lacks one."""
    whole = femnist_like()
    whole.select(range(200)).save_to_disk(str(tmp_path / "d" / "train"))
    test = whole.select(range(200, 240)).filter(lambda row: row["writer_id"] != WRITERS[3])
    test = test.select(np.random.default_rng(1).permutation(len(test)))
    datasets.DatasetDict({"train": whole.select(range(200)), "test": test}).save_to_disk(str(tmp_path / "dd"))
    source = HuggingFace(str(tmp_path / "dd"), label="character", client_id="writer_id")
    splits = source.load(seed=3)
    codes = splits.train_client_ids
    from lightfed.data.natural_ids import natural_id_codes

    train_codes, test_codes = natural_id_codes(whole.select(range(200))["writer_id"], test["writer_id"])
    assert np.array_equal(codes, train_codes)
    for writer, code in zip(test["writer_id"], test_codes, strict=True):
        assert code == sorted(WRITERS).index(writer)
    parts = NaturalIdPartitioner().partition(None, seed=3, client_ids=codes)
    with pytest.raises(ConfigError, match=r"no split 'training' \(it has train, test\)"):
        HuggingFace(str(tmp_path / "dd"), train_split="training").load(0)
    assert [sorted({whole["writer_id"][i] for i in part}) for part in parts] == [[w] for w in sorted(WRITERS)]


def test_a_missing_column_is_one_line_that_lists_the_columns(saved_femnist):
    with pytest.raises(ConfigError, match=r"no column 'label' \(it has image, writer_id, character\)"):
        HuggingFace(str(saved_femnist)).load(0)


def test_a_test_split_that_is_the_train_split_is_refused():
    with pytest.raises(ConfigError, match=r"test_split 'train' is the train_split"):
        HuggingFace("parquet", train_split="train", test_split="train")


def _saved(tmp_path: Path, train: dict, test: dict | None = None) -> str:
    """A dataset of ``train`` (and ``test``) columns saved to disk; its folder."""
    splits = {"train": datasets.Dataset.from_dict(train)}
    if test is not None:
        splits["test"] = datasets.Dataset.from_dict(test)
    datasets.DatasetDict(splits).save_to_disk(str(tmp_path / "saved"))
    return str(tmp_path / "saved")


def _features(num: int, width: int = 4) -> list[list[float]]:
    return [[float(i % 3)] * width for i in range(num)]


def test_string_labels_reach_the_model_as_codes_and_the_run_says_the_mapping(tmp_path):
    names = ["cat", "dog", "emu"]
    train = {"x": _features(60), "label": [names[i % 3] for i in range(60)]}
    test = {"x": _features(12), "label": [names[(i + 1) % 3] for i in range(12)]}
    source = HuggingFace(_saved(tmp_path, train, test), inputs="x")
    splits = source.load(0)
    assert splits.label_names == names and splits.num_classes == 3
    assert [int(splits.train[i][1]) for i in range(3)] == [0, 1, 2] and int(splits.test[0][1]) == 1
    assert splits.train_labels.tolist() == [i % 3 for i in range(60)]
    data = FederatedDataModule(source, DirichletPartitioner(2, alpha=1.0), batch_size=8)
    model = MLP(in_features=4, num_classes=3, hidden=(8,))
    trainer = small_trainer(tmp_path / "runs", rounds=1, clients_per_round=2, local_steps=2)
    trainer.fit(model, data, FedAvg())
    assert json.loads((trainer.log_dir / "labels.json").read_text()) == {"0": "cat", "1": "dog", "2": "emu"}


@pytest.mark.parametrize(
    "train, test, message",
    [
        ({"x": _features(8), "label": [0, 1, None, 1, 0, 1, 0, 1]}, None, r"label column 'label' has empty \(None\)"),
        ({"x": _features(8), "label": [0, 1, -1, 1, 0, 1, 0, 1]}, None, "label column 'label' has negative labels"),
        (
            {"x": [[1.0] * (1 + i % 2) for i in range(8)], "label": [0, 1] * 4},
            None,
            "column 'x' holds lists of 1 to 2 values: give it a transform",
        ),
        (
            {"x": _features(8), "label": [0, 1] * 4, "writer": list(range(8))},
            {"x": _features(2), "label": [0, 1], "writer": ["a", "b"]},
            "client_id column 'writer' is int64 in 'train' and string",
        ),
    ],
)
def test_bad_rows_are_refused_in_one_line_before_anything_is_written(tmp_path, train, test, message):
    source = HuggingFace(_saved(tmp_path, train, test), inputs="x", client_id="writer" if "writer" in train else None)
    data = FederatedDataModule(source, DirichletPartitioner(2, alpha=1.0), batch_size=4)
    with pytest.raises(ConfigError, match=message):
        small_trainer(tmp_path / "runs").fit(MLP(in_features=4, num_classes=2, hidden=(8,)), data, FedAvg())
    assert not (tmp_path / "runs").exists()


def test_an_empty_train_split_is_refused_in_one_line_before_anything_is_written(tmp_path):
    """datasets itself cannot open an empty split: its reason, in one line (a split it opens empty is refused by the
    data module: tests/data/test_lightning_datamodule.py)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = pa.schema([("x", pa.list_(pa.float64())), ("label", pa.int64())])
    pq.write_table(pa.table({"x": [], "label": []}, schema=schema), tmp_path / "train.parquet")
    pq.write_table(pa.table({"x": _features(2), "label": [0, 1]}, schema=schema), tmp_path / "test.parquet")
    files = {"train": str(tmp_path / "train.parquet"), "test": str(tmp_path / "test.parquet")}
    data = FederatedDataModule(
        HuggingFace("parquet", data_files=files, inputs="x"), DirichletPartitioner(2), batch_size=4
    )
    with pytest.raises(ConfigError, match="datasets could not open 'parquet': .*BatchSize must be greater than 0"):
        small_trainer(tmp_path / "runs").fit(MLP(in_features=4, num_classes=2, hidden=(8,)), data, FedAvg())
    assert not (tmp_path / "runs").exists()


def _loud(value):
    """A column transform of the test's own module: accepted, as a user's own function is."""
    return torch.tensor([len(value)])


def test_a_transform_that_is_a_library_function_is_refused_before_any_row_is_read(tmp_path, capsys):
    """``transforms: {text: os.system}`` would run the dataset's text as shell commands: a column transform is
    lightfed's or the user's own code, so it is refused in one line and no command runs."""
    mark = tmp_path / "ran"
    data = _saved(tmp_path, {"text": [f"touch {mark}"] * 40, "label": [0, 1] * 20})
    config = tmp_path / "config.yaml"
    config.write_text(
        "data:\n  dataset:\n    class_path: lightfed.data.HuggingFace\n    init_args:\n"
        f"      path: {data}\n      inputs: text\n      transforms: {{text: os.system}}\n      test_split: null\n"
        "  partitioner: {class_path: lightfed.data.IIDPartitioner, init_args: {num_clients: 2}}\n"
        "trainer: {clients_per_round: 2}\n"
    )
    argv = ["test", "--config", str(ROOT / "configs" / "quickstart.yaml"), "--config", str(config)]
    assert refusal_lines([*argv, "--trainer.root_dir", str(tmp_path / "runs")], capsys) == [
        "lightfed: error: HuggingFace's transforms['text']: posix.system is not lightfed's or your own code but "
        "the standard library's or an installed package's, which would run on the dataset's values: name a "
        "function or class of lightfed or of your own modules"
    ]
    assert not mark.exists() and not (tmp_path / "runs").exists()


def test_lightfeds_and_the_users_own_transforms_are_accepted_and_library_functions_are_not():
    text = "a"
    source = HuggingFace("parquet", inputs="x", transforms={"x": _loud, "y": lambda v: v}, example_transform=None)
    assert source.transforms["x"](text).tolist() == [1]
    HuggingFace("parquet", transforms={"x": partial(_loud)}, example_transform=next_characters)
    with pytest.raises(ConfigError, match=r"HuggingFace's example_transform: subprocess.run is not lightfed's"):
        HuggingFace("parquet", example_transform=subprocess.run)
    with pytest.raises(ConfigError, match=r"transforms\['x'\]: builtins.eval is not lightfed's"):
        HuggingFace("parquet", transforms={"x": eval})
    with pytest.raises(ConfigError, match=r"transforms\['x'\]: shutil.rmtree is not lightfed's"):
        HuggingFace("parquet", transforms={"x": partial(shutil.rmtree)})
