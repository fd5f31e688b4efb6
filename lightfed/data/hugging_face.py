"""Any Hugging Face ``datasets`` dataset as a dataset source: a hub name, local files or a saved dataset."""

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from torch.utils.data import Dataset

from lightfed.data.datasets import DatasetSource, DatasetSplits
from lightfed.data.hf_transforms import to_tensor
from lightfed.data.validation import held_count, held_out
from lightfed.errors import ConfigError
from lightfed.streams import DataStream
from lightfed.user_modules import check_own_code

if TYPE_CHECKING:
    import datasets


class HuggingFace(DatasetSource):
    """A dataset ``datasets.load_dataset`` opens (a hub name where the hub is reachable; ``parquet``, ``csv``,
    ``json``, ``imagefolder`` with ``data_files``; a folder of such files) or ``datasets.load_from_disk`` does (a
    folder written by ``save_to_disk``), read row by row through DataLoaders.

    An example is ``(inputs, label)`` with one ``inputs`` column, else a dict of the ``inputs`` columns (and the label);
    each column goes through its ``transforms`` entry (default: ``to_tensor``: numbers, lists, images in [0, 1]), and
    ``example_transform`` may then rebuild the whole example. ``client_id`` names the column of natural client ids
    for ``NaturalIdPartitioner``: a training row's code is its id's rank among the sorted ids of the train and test
    splits together (the test set keeps no client ids: it is evaluated centrally). Without a ``test_split``,
    ``test_fraction`` of the training rows is held out as the test set (stratified by client id and label, from the
    seed). Arrow tables smaller than a quarter of the available memory are read into memory; larger ones stay
    memory-mapped.

    In a config (FEMNIST from the hub, one client per writer):

    ```yaml
    data:
      dataset:
        class_path: lightfed.data.HuggingFace
        init_args: {path: flwrlabs/femnist, inputs: image, label: character, client_id: writer_id, test_split: null}
      partitioner: {class_path: lightfed.data.NaturalIdPartitioner}
    ```

    Examples:
        >>> import os
        >>> from lightfed.data import HuggingFace
        >>> source = HuggingFace("flwrlabs/femnist", inputs="image", label="character", client_id="writer_id")
        >>> source.example({"image": [[0.0, 1.0]], "character": 3})  # a row as the model gets it
        (tensor([[0., 1.]]), tensor(3))
        >>> HuggingFace("flwrlabs/femnist", transforms={"image": os.system})
        Traceback (most recent call last):
        ...
        lightfed.errors.ConfigError: HuggingFace's transforms['image']: ...system is not lightfed's or your own code ...
    """

    def __init__(
        self,
        path: str,
        name: str | None = None,
        data_files: str | list[str] | dict[str, str | list[str]] | None = None,
        inputs: str | list[str] = "image",
        label: str | None = "label",
        client_id: str | None = None,
        transforms: dict[str, Callable[[Any], Any]] | None = None,
        example_transform: Callable[[Any], Any] | None = None,
        train_split: str = "train",
        test_split: str | None = "test",
        test_fraction: float = 0.1,
        num_classes: int | None = None,
        in_memory: bool | None = None,
        revision: str | None = None,
    ) -> None:
        """
        Args:
            path: A hub dataset (``flwrlabs/femnist``), a builder with ``data_files`` (``parquet``, ``csv``,
                ``json``, ``imagefolder``), a folder of data files, or a folder written by ``save_to_disk``.
            name: The dataset's configuration (``load_dataset``'s ``name``).
            data_files: The files of each split, as ``load_dataset`` takes them (``{train: a.parquet, test: b.parquet}``).
            inputs: The input column, or several (the example is then a dict).
            label: The label column (the partitioners' labels); null: none.
            client_id: The column of natural client ids (a writer, a speaker); null: none.
            transforms: Per column, a function from its value to a tensor (an import path in a config); a column not
                named here goes through ``to_tensor``. It and ``example_transform`` are lightfed's or the user's own
                code (a function or a callable class): a function of the standard library or an installed package
                is refused, since it would run on the dataset's values.
            example_transform: A function of the whole example after the column transforms (e.g.
                ``lightfed.data.hf_transforms.next_characters``).
            train_split: The split whose rows are divided across clients.
            test_split: The central test set's split; null or absent from the dataset: hold out ``test_fraction``.
            test_fraction: Share of the training rows held out as the test set when there is no test split.
            num_classes: Number of classes; null: the label column's ``ClassLabel`` count, else the largest label + 1.
            in_memory: Read the Arrow tables into memory; null: when they take less than a quarter of the available
                memory; false: memory-mapped.
            revision: The hub revision (a tag, branch or commit) to read.
        """
        if test_split == train_split:
            raise ConfigError(f"test_split {test_split!r} is the train_split; name another split, or null to hold out")
        if not 0.0 < test_fraction < 1.0:
            raise ConfigError(f"test_fraction must be between 0 and 1 (exclusive), got {test_fraction}")
        named = {f"transforms[{column!r}]": transform for column, transform in (transforms or {}).items()}
        for option, transform in {**named, "example_transform": example_transform}.items():
            if transform is not None:
                instead = "a function or class of lightfed or of your own modules"
                check_own_code(f"HuggingFace's {option}", transform, "the dataset's values", instead)
        self.path, self.name, self.data_files, self.revision = path, name, data_files, revision
        self.inputs = [inputs] if isinstance(inputs, str) else list(inputs)
        self.single_input = isinstance(inputs, str)
        self.label, self.client_id = label, client_id
        self.transforms = dict(transforms or {})
        self.example_transform = example_transform
        self.train_split, self.test_split, self.test_fraction = train_split, test_split, test_fraction
        self.num_classes, self.in_memory = num_classes, in_memory
        self.label_names: list[str] | None = None  # the labels coded, in code order, when they are not integers
        self._label_codes: dict[Any, int] = {}

    def load(self, seed: int) -> DatasetSplits:
        """The train and test rows as map-style datasets, with their labels and natural client ids as arrays."""
        from lightfed.data.natural_ids import natural_id_codes  # pyarrow, with datasets, only where this is used

        splits = self._open()
        if self.train_split not in splits:
            raise ConfigError(f"{self.path} has no split {self.train_split!r} (it has {', '.join(splits)})")
        train = splits[self.train_split]
        missing = [c for c in [*self.inputs, self.label, self.client_id] if c and c not in train.column_names]
        if missing:
            raise ConfigError(
                f"{self.path} has no column {missing[0]!r} (it has {', '.join(train.column_names)}); "
                "set inputs, label and client_id to its columns"
            )
        test = splits[self.test_split] if self.test_split is not None and self.test_split in splits else None
        self._check_columns(train, test)
        if self.client_id is None:
            ids = None
        elif test is None or self.client_id not in test.column_names:
            ids = natural_id_codes(_column(train, self.client_id))[0]
        else:
            ids = natural_id_codes(_column(train, self.client_id), _column(test, self.client_id))[0]
        labels, self.label_names = (None, None) if self.label is None else self._labels(train, test)
        if test is None:
            rng = np.random.default_rng([seed, DataStream.TEST])
            test_rows = held_out(len(train), held_count(len(train), self.test_fraction), rng, ids, labels)
            kept = np.delete(np.arange(len(train)), test_rows)
            test, train = train.select(test_rows), train.select(kept)
            labels = None if labels is None else labels[kept]
            ids = None if ids is None else ids[kept]
        return DatasetSplits(
            self._examples(train), self._examples(test), self._num_classes(train, labels), labels, ids,
            label_names=self.label_names,
        )  # fmt: skip

    def _check_columns(self, train: "datasets.Dataset", test: "datasets.Dataset | None") -> None:
        """Refuses, before anything is trained, client ids of one type in train and another in test, and an input
        column of lists of different lengths that no transform makes one shape."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if self.client_id is not None and test is not None and self.client_id in test.column_names:
            kinds = [_column(split, self.client_id).type for split in (train, test)]
            if len({pa.types.is_integer(kind) for kind in kinds}) > 1:
                raise ConfigError(
                    f"client_id column {self.client_id!r} is {kinds[0]} in {self.train_split!r} and {kinds[1]} in "
                    f"{self.test_split!r}: give both splits ids of one type"
                )
        for name in self.inputs:
            column = _column(train, name)
            if name in self.transforms or self.example_transform is not None or not pa.types.is_list(column.type):
                continue
            lengths = pc.list_value_length(column)
            low, high = pc.min(lengths).as_py(), pc.max(lengths).as_py()
            if low != high:
                raise ConfigError(
                    f"column {name!r} holds lists of {low} to {high} values: give it a transform (transforms) that "
                    "makes every example one shape, e.g. by padding"
                )

    def _labels(
        self, train: "datasets.Dataset", test: "datasets.Dataset | None"
    ) -> tuple[np.ndarray, list[str] | None]:
        """The label column of the training rows as int64: integers (a ``ClassLabel``) as they are, anything else
        (strings) as codes of its sorted values over both splits, which the examples then carry too; the values
        coded, in code order (None for integers). Empty (None) and negative labels are refused."""
        import pyarrow as pa

        from lightfed.data.natural_ids import natural_id_codes

        assert self.label is not None
        columns = [_column(split, self.label) for split in (train, test) if split is not None]
        columns = [column for column in columns if column.type == columns[0].type]  # a test split without labels
        if any(column.null_count for column in columns):
            raise ConfigError(f"label column {self.label!r} has empty (None) labels: drop or label those rows")
        if pa.types.is_integer(columns[0].type):
            labels = np.asarray(columns[0].to_numpy(), dtype=np.int64)
            if len(labels) and labels.min() < 0:
                raise ConfigError(
                    f"label column {self.label!r} has negative labels ({labels.min()}: a ClassLabel's missing "
                    "label is -1): drop or label those rows"
                )
            return labels, None
        names = sorted({value.as_py() for column in columns for value in column.unique()})
        self._label_codes = {name: code for code, name in enumerate(names)}
        return natural_id_codes(*columns)[0], [str(name) for name in names]

    def _open(self) -> "datasets.DatasetDict":
        """The dataset's splits: ``load_from_disk`` for a saved dataset, ``load_dataset`` for anything else."""
        try:
            import datasets
        except ImportError:
            raise ConfigError(
                "lightfed.data.HuggingFace needs Hugging Face datasets: pip install 'lightfed[hf]'"
            ) from None
        folder = Path(self.path).expanduser()
        saved = (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()
        files = [folder] if saved else [Path(f) for f in _file_list(self.data_files)]
        keep_in_memory = self.in_memory if self.in_memory is not None else _fits_in_memory(files)
        try:
            if saved:
                opened = datasets.load_from_disk(str(folder), keep_in_memory=keep_in_memory)
            else:
                opened = datasets.load_dataset(
                    self.path, self.name, data_files=self.data_files, revision=self.revision,
                    keep_in_memory=keep_in_memory,
                )  # fmt: skip
        except Exception as error:  # datasets' own, or what it hit: a missing file, an empty split, a bad row
            cause: BaseException = error
            while cause.__cause__ is not None:  # datasets wraps the reason ("An error occurred while generating")
                cause = cause.__cause__
            reason = " ".join(f"{type(cause).__name__}: {cause}".split())
            raise ConfigError(f"datasets could not open {self.path!r}: {reason}") from error
        if isinstance(opened, datasets.Dataset):
            return datasets.DatasetDict({self.train_split: opened})
        return opened

    def _examples(self, rows: "datasets.Dataset") -> "Rows":
        columns = [*self.inputs, *([self.label] if self.label else [])]
        return Rows(rows.select_columns(columns), self)

    def _num_classes(self, train: "datasets.Dataset", labels: np.ndarray | None) -> int:
        feature = train.features.get(self.label) if self.label else None
        if self.num_classes is not None:
            return self.num_classes
        if feature is not None and hasattr(feature, "num_classes"):
            return int(feature.num_classes)
        return int(labels.max()) + 1 if labels is not None and len(labels) else 0

    def example(self, row: dict[str, Any]) -> Any:
        """One row (a dict of column values) as a training example; a coded label as its code."""
        if self._label_codes and self.label is not None:
            row = {**row, self.label: self._label_codes[row[self.label]]}
        values = {column: self.transforms.get(column, to_tensor)(row[column]) for column in row}
        if self.single_input and self.label is not None and self.example_transform is None:
            example: Any = (values[self.inputs[0]], values[self.label])
        elif self.single_input and self.label is None and self.example_transform is None:
            example = values[self.inputs[0]]
        else:
            example = values
        return example if self.example_transform is None else self.example_transform(example)


class Rows(Dataset):
    """A ``datasets.Dataset`` read row by row (a DataLoader's batch in one columnar read), each row made an example
    by its ``HuggingFace`` source."""

    def __init__(self, rows: "datasets.Dataset", source: HuggingFace) -> None:
        self.rows, self.source = rows, source

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, index: int) -> Any:
        return self.source.example(self.rows[int(index)])

    def __getitems__(self, indices: list[int]) -> list[Any]:
        batch = self.rows[list(indices)]
        return [self.source.example({column: batch[column][i] for column in batch}) for i in range(len(indices))]


def _column(rows: "datasets.Dataset", name: str) -> Any:
    """A column as Arrow (no copy into Python objects), in the order of the rows."""
    return rows.with_format("arrow")[name]


def _file_list(data_files: str | list[str] | dict[str, str | list[str]] | None) -> list[str]:
    if data_files is None:
        return []
    if isinstance(data_files, str):
        return [data_files]
    if isinstance(data_files, dict):
        return [file for files in data_files.values() for file in _file_list(files)]
    return list(data_files)


def _fits_in_memory(paths: list[Path]) -> bool:
    """Whether local files (a folder: all its files) take less than a quarter of the available memory; False where
    they are not local (a hub dataset) or the available memory is not known."""
    try:
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return False
    sizes = [sum(f.stat().st_size for f in p.rglob("*") if f.is_file()) if p.is_dir() else p.stat().st_size
             for p in paths if p.exists()]  # fmt: skip
    return bool(sizes) and len(sizes) == len(paths) and sum(sizes) < available / 4
