import torch

from lightfed.core.sums import Sums


def test_named_views_share_one_float64_buffer():
    sums = Sums({"a": 3, "b": 1}, torch.device("cpu"))
    sums.add("a", torch.tensor([1.0, 2.0, 3.0]), weight=2.0)
    sums.add("b", 5.0)
    sums.add("b", 1.0, weight=0.5)
    assert sums.buffer.dtype == torch.float64
    assert sums.buffer.tolist() == [2.0, 4.0, 6.0, 5.5]
    sums.zero_()
    assert sums["a"].tolist() == [0.0, 0.0, 0.0] and list(sums) == ["a", "b"]


def test_float64_sum_is_independent_of_order():
    torch.manual_seed(0)
    values = [torch.randn(1000) * 10 ** (i % 5) for i in range(40)]
    forward, backward = Sums({"x": 1000}, torch.device("cpu")), Sums({"x": 1000}, torch.device("cpu"))
    for v in values:
        forward.add("x", v)
    for v in reversed(values):
        backward.add("x", v)
    assert torch.equal(forward["x"].float(), backward["x"].float())


def test_numbers_added_after_a_read_reach_the_next_read():
    sums = Sums({"n": 1, "t": 2}, torch.device("cpu"))
    sums.add("n", 2)
    assert sums["n"].item() == 2.0
    sums.add("n", 0.1, weight=3.0)
    sums.add("t", torch.ones(2))
    assert sums.buffer.tolist() == [2.0 + 0.1 * 3.0, 1.0, 1.0]
    sums.add("n", 1.0)
    sums.zero_()
    assert sums.buffer.tolist() == [0.0, 0.0, 0.0]


def test_rows_add_what_adding_row_by_row_adds():
    torch.manual_seed(0)
    rows, weights = torch.randn(7, 2, 3), [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0]
    by_row, at_once = (
        Sums({"x": 6, "t": 6, "e": 0}, torch.device("cpu")),
        Sums({"x": 6, "t": 6, "e": 0}, torch.device("cpu")),
    )
    for row, weight in zip(rows, weights, strict=True):
        by_row.add("x", row, weight=weight)
        by_row.add("t", row)
    at_once.add_rows("x", rows, weights)
    at_once.add_rows("t", rows)
    at_once.add_rows("e", torch.zeros(7, 0))  # a model without buffers
    assert torch.allclose(by_row.buffer, at_once.buffer, rtol=1e-15, atol=0)
    assert torch.equal(by_row.buffer.float(), at_once.buffer.float())
