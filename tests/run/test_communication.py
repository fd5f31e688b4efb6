"""What each round's clients receive and send, in bytes, against a hand count: float32 weights at 4 bytes a value,
a client's four counts at 4 bytes each, a secure-aggregation message at modulus_bits a value; totals across a resume."""

from lightfed.strategies import FedAvg
from lightfed.transforms import SecureAggregation
from tests.conftest import small_data, small_model, small_trainer

D = 3818  # SmallCNN of width 8 (small_model): its parameters; it has no floating buffers
CLIENTS = 4  # small_trainer's clients a round


def _fit(root, rounds=2, **settings):
    trainer = small_trainer(root, rounds=rounds, **settings.pop("trainer", {}))
    trainer.fit(small_model(), small_data(), FedAvg(weighting="uniform"), **settings)
    return trainer


def test_a_fedavg_round_costs_the_weights_down_and_the_delta_and_counts_up_per_client(tmp_path):
    metrics = _fit(tmp_path).last_metrics
    assert metrics["communication/received_bytes"] == CLIENTS * D * 4
    assert metrics["communication/sent_bytes"] == CLIENTS * (D * 4 + 16)
    assert metrics["communication/sent_bytes_total"] == 2 * CLIENTS * (D * 4 + 16)


def test_the_totals_go_on_across_a_resume(tmp_path):
    _fit(tmp_path, rounds=1)
    resumed = small_trainer(tmp_path, rounds=3)
    resumed.fit(small_model(), small_data(), FedAvg(weighting="uniform"), ckpt_path="last")
    assert resumed.last_metrics["communication/received_bytes_total"] == 3 * CLIENTS * D * 4


def test_a_secure_aggregation_client_sends_its_masked_contribution_and_a_dropped_one_nothing(tmp_path):
    secagg = SecureAggregation(bits=16, modulus_bits=32, dropout=0.25)  # 1 of the 4 clients drops each round
    metrics = _fit(tmp_path, transforms=[secagg]).last_metrics
    assert metrics["communication/sent_bytes"] == (CLIENTS - 1) * (D + 1) * 32 // 8  # FedAvg's delta and weight
    assert metrics["communication/received_bytes"] == CLIENTS * D * 4
