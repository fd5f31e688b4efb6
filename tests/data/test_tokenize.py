"""lightfed.data.hf_transforms.Tokenize with a tiny word-level tokenizer saved locally (nothing downloaded)."""

import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from lightfed.cli import run
from lightfed.data import HuggingFace
from lightfed.data.hf_transforms import Tokenize
from lightfed.errors import ConfigError
from tests.conftest import trainer_options

datasets = pytest.importorskip("datasets")
tokenizers = pytest.importorskip("tokenizers")
transformers = pytest.importorskip("transformers")

WORDS = ["[PAD]", "[UNK]", "the", "cat", "sat", "on", "mat", "a", "dog", "ran", "to", "park", "big", "red"]
ID = {word: i for i, word in enumerate(WORDS)}  # [PAD] 0, [UNK] 1, the 2, cat 3, ...


def save_tokenizer(folder: Path, pad: bool = True) -> Path:
    """A WordLevel tokenizer over WORDS (whitespace-split, no special tokens added) saved by ``save_pretrained``."""
    model = tokenizers.models.WordLevel(vocab=ID, unk_token="[UNK]")
    core = tokenizers.Tokenizer(model)
    core.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    special = {"pad_token": "[PAD]"} if pad else {}
    wrapped = transformers.PreTrainedTokenizerFast(tokenizer_object=core, unk_token="[UNK]", **special)
    wrapped.save_pretrained(str(folder))
    return folder


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> str:
    return str(save_tokenizer(tmp_path_factory.mktemp("tokenizer")))


def test_ids_are_right_padded_and_truncated_to_max_length(tokenizer):
    tokenize = Tokenize(tokenizer, max_length=5)
    ids = tokenize("the cat sat")
    assert isinstance(ids, torch.Tensor) and ids.dtype == torch.int64 and ids.shape == (5,)
    assert ids.tolist() == [2, 3, 4, 0, 0]
    assert tokenize("the big red dog ran to the park").tolist() == [2, 12, 13, 8, 9]
    assert tokenize("the zebra").tolist() == [2, 1, 0, 0, 0]  # an unknown word: [UNK]


def test_next_tokens_shift_by_one_with_padding_targets_ignored(tokenizer):
    tokenize = Tokenize(tokenizer, max_length=5, next_tokens=True)
    example = tokenize("the cat sat on")  # 6 ids: 2 3 4 5 0 0
    assert isinstance(example, dict)
    assert example["tokens"].tolist() == [2, 3, 4, 5, 0]
    assert example["targets"].tolist() == [3, 4, 5, -100, -100]
    assert example["tokens"].dtype == example["targets"].dtype == torch.int64
    full = tokenize("a big red dog ran to the park")  # truncated to 6 ids: 7 12 13 8 9 10
    assert isinstance(full, dict)
    assert full["tokens"].tolist() == [7, 12, 13, 8, 9] and full["targets"].tolist() == [12, 13, 8, 9, 10]
    empty = tokenize("")
    assert isinstance(empty, dict) and empty["targets"].tolist() == [-100] * 5


def test_a_missing_folder_and_a_tokenizer_without_a_pad_token_are_refused(tmp_path):
    with pytest.raises(ConfigError, match="does not exist") as missing:
        Tokenize(str(tmp_path / "nowhere"), max_length=4)
    no_pad = save_tokenizer(tmp_path / "no-pad", pad=False)
    with pytest.raises(ConfigError, match="no pad token") as unpadded:
        Tokenize(str(no_pad), max_length=4)
    assert str(no_pad) in str(unpadded.value)
    assert "\n" not in str(missing.value) + str(unpadded.value)


def test_it_pickles_for_dataloader_workers(tokenizer):
    tokenize = pickle.loads(pickle.dumps(Tokenize(tokenizer, max_length=4)))
    assert tokenize("the dog").tolist() == [2, 8, 0, 0]


def saved_text(folder: Path, num: int = 40) -> Path:
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(WORDS[2:], rng.integers(1, 9))) for _ in range(num)]
    datasets.Dataset.from_dict({"text": texts, "label": [i % 2 for i in range(num)]}).save_to_disk(str(folder))
    return folder


def test_a_text_dataset_gives_sequence_classifier_examples(tokenizer, tmp_path):
    folder = saved_text(tmp_path / "text")
    source = HuggingFace(
        path=str(folder),
        inputs="text",
        label="label",
        transforms={"text": Tokenize(tokenizer, max_length=6)},
        test_split=None,
    )
    splits = source.load(seed=0)
    assert len(splits.train) + len(splits.test) == 40 and splits.num_classes == 2
    ids, label = splits.train[0]
    assert ids.dtype == torch.int64 and ids.shape == (6,) and int(label) in (0, 1)
    texts = datasets.load_from_disk(str(folder))["text"]
    assert any(ids.tolist() == Tokenize(tokenizer, max_length=6)(text).tolist() for text in texts)


LLAMA = (
    "{model_type: llama, vocab_size: 16, hidden_size: 16, intermediate_size: 32, num_hidden_layers: 1, "
    "num_attention_heads: 2, num_key_value_heads: 1, max_position_embeddings: 32, pad_token_id: 0}"
)
CAUSAL_LM = """
model:
  class_path: lightfed.models.CausalLM
  init_args: {{config: {llama}}}
data:
  dataset:
    class_path: lightfed.data.HuggingFace
    init_args:
      path: {data}
      inputs: text
      label: null           # the tokens/targets dict is the whole example
      transforms:
        text:
          class_path: lightfed.data.hf_transforms.Tokenize
          init_args: {{tokenizer: {tokenizer}, max_length: 8, next_tokens: true}}
      test_split: null
  partitioner: {{class_path: lightfed.data.IIDPartitioner, init_args: {{num_clients: 2}}}}
"""
CLASSIFIER = """
model:
  class_path: lightfed.models.SequenceClassifier
  init_args: {{num_classes: 2, config: {llama}}}
data:
  dataset:
    class_path: lightfed.data.HuggingFace
    init_args:
      path: {data}
      inputs: text
      label: label
      transforms:
        text:
          class_path: lightfed.data.hf_transforms.Tokenize
          init_args: {{tokenizer: {tokenizer}, max_length: 8}}
      test_split: null
  partitioner: {{class_path: lightfed.data.IIDPartitioner, init_args: {{num_clients: 2}}}}
"""


@pytest.mark.parametrize("template", [CAUSAL_LM, CLASSIFIER], ids=["causal-lm", "classifier"])
def test_a_config_trains_a_transformer_on_tokenized_text(template, tokenizer, tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(template.format(llama=LLAMA, data=saved_text(tmp_path / "text"), tokenizer=tokenizer))
    settings = dict(rounds=1, clients_per_round=2, accelerator="cpu", root_dir=tmp_path, progress_bar="false")
    metrics = run(["fit", "--config", str(config), "--data.batch_size", "4", *trainer_options(**settings)])
    assert metrics["round/clients"] == 2 and np.isfinite(metrics["val_loss"])
