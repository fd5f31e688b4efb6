"""Hugging Face transformers as clients: a causal LM and a sequence classifier, built from a config or a local folder
(never downloaded), with LoRA; trained from YAML to the same weights, bit for bit, on one and two processes and on a
resume."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from lightfed.errors import ConfigError
from lightfed.models import CausalLM, LoRA, SequenceClassifier
from tests.conftest import fit_in_subprocess, refusal_lines
from tests.models.tiny_transformers import LLAMA, causal_lm, classifier

CONFIGS = Path(__file__).resolve().parents[2] / "configs" / "llm"


def test_padding_targets_are_neither_trained_on_nor_scored():
    model = causal_lm()
    tokens = torch.randint(16, (2, 6), generator=torch.Generator().manual_seed(0))
    targets = torch.randint(16, (2, 6), generator=torch.Generator().manual_seed(1))
    padded = targets.clone()
    padded[:, 4:] = -100
    with torch.no_grad():
        logits = model(tokens)
        loss = model.training_step({"tokens": tokens, "targets": padded}, 0)
        model.validation_step({"tokens": tokens, "targets": padded}, 0)
    expected = F.cross_entropy(logits[:, :4].reshape(8, 16), targets[:, :4].reshape(8))
    torch.testing.assert_close(loss, expected)
    hits = (logits[:, :4].argmax(-1) == targets[:, :4]).float().mean()
    torch.testing.assert_close(model.val_acc.compute(), hits)


def test_the_classifier_reads_the_last_real_token_and_ignores_padding():
    model = classifier(lora=LoRA(r=2, alpha=4)).eval()
    tokens = torch.tensor([[3, 5, 7, 2]])
    with torch.no_grad():
        plain, padded = model(tokens), model(torch.tensor([[3, 5, 7, 2, 16, 16]]))
        other = model(torch.tensor([[3, 5, 7, 9]]))
    assert plain.shape == (1, 3)
    torch.testing.assert_close(plain, padded)
    assert not torch.allclose(plain, other)


def test_a_local_folder_loads_without_a_download_and_a_missing_one_is_refused(tmp_path):
    built = causal_lm()
    built.net.save_pretrained(tmp_path / "tiny")
    loaded = CausalLM(pretrained=str(tmp_path / "tiny"), lora=LoRA(r=2, alpha=4))
    base = dict(built.named_parameters())
    frozen = {n.replace("base_model.model.", "").replace(".base_layer", ""): p for n, p in loaded.named_parameters()}
    assert all(torch.equal(frozen[name], p) for name, p in base.items())
    with pytest.raises(ConfigError, match="model.pretrained .*nowhere"):
        CausalLM(pretrained=str(tmp_path / "nowhere"))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (dict(config=LLAMA, load_in_4bit=True), "load_in_4bit quantizes with bitsandbytes on a CUDA GPU"),
        (dict(), "exactly one of pretrained"),
        (dict(config={"vocab_size": 8}), "needs a model_type"),
    ],
)
def test_bad_settings_are_refused_in_one_line(settings, message):
    if settings.get("load_in_4bit") and torch.cuda.is_available():
        pytest.skip("a GPU can quantize")
    with pytest.raises(ConfigError, match=message) as refused:
        CausalLM(**settings)
    assert "\n" not in str(refused.value)


@pytest.mark.parametrize("model_class", [CausalLM, SequenceClassifier])
@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("empty", "model.pretrained '{folder}' has no config.json: give a folder that save_pretrained wrote"),
        ("nowhere", "model.pretrained '{folder}' is not a folder: give a local folder that save_pretrained wrote"),
        ("nonsense", "model.config's model_type 'nonsense' is not one of transformers' (e.g. llama, gpt2, bert)"),
        (
            "negative",
            "model.config: transformers cannot build a llama model from it: RuntimeError: Trying to create tensor "
            "with negative dimension -4: [16, -4]",
        ),
    ],
    ids=["empty", "nowhere", "nonsense", "negative"],
)
def test_a_bad_folder_or_config_is_refused_in_one_line(model_class, setting, message, tmp_path, capsys):
    folder = tmp_path / setting
    if setting == "empty":
        folder.mkdir()
    config = {**LLAMA, "model_type": "nonsense"} if setting == "nonsense" else {**LLAMA, "hidden_size": -4}
    settings = dict(pretrained=str(folder)) if setting in ("empty", "nowhere") else dict(config=config)
    with pytest.raises(ConfigError) as refused:
        model_class(**({"num_classes": 2} if model_class is SequenceClassifier else {}), **settings)
    assert str(refused.value) == message.format(folder=folder)


def test_an_empty_pretrained_folder_ends_the_command_in_one_line(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    argv = ["fit", "--model", "lightfed.models.CausalLM", "--model.pretrained", str(tmp_path / "empty")]
    assert refusal_lines([*argv, "--trainer.root_dir", str(tmp_path / "runs")], capsys) == [
        f"lightfed: error: model.pretrained '{tmp_path / 'empty'}' has no config.json: give a folder that "
        "save_pretrained wrote"
    ]
    assert not (tmp_path / "runs").exists()


def test_lora_settings_are_checked():
    with pytest.raises(ConfigError, match="r >= 1"):
        LoRA(r=0)
    assert isinstance(classifier(lora=LoRA(r=2, alpha=4)), SequenceClassifier)


def final_params(config: Path, root: Path, devices: int, *options: str) -> torch.Tensor:
    fit_in_subprocess(config, root, devices, *options)
    return torch.load(next(root.glob("*/version_0/checkpoints/last.ckpt")), weights_only=False)["params"]


@pytest.mark.slow
@pytest.mark.parametrize("config", ["pfl.yaml", "authorship.yaml"])
def test_yaml_transformer_runs_agree_on_one_and_two_processes_and_resume_bit_for_bit(tmp_path, config):
    rounds = ("--trainer.rounds", "2")
    one = final_params(CONFIGS / config, tmp_path / "one", 1, *rounds)
    two = final_params(CONFIGS / config, tmp_path / "two", 2, *rounds)
    assert torch.equal(one, two)  # each client on one thread, float64 sums in a fixed order
    first = final_params(CONFIGS / config, tmp_path / "resumed", 1, "--trainer.rounds", "1")
    resumed = final_params(CONFIGS / config, tmp_path / "resumed", 1, *rounds, "--ckpt_path", "last")
    assert not torch.equal(first, resumed) and torch.equal(resumed, one)
