import numpy as np

from lightfed.audit.silent_clients import silent_half


def test_pairs_of_shadows_silence_complementary_halves():
    first, second, third = (silent_half(11, s, halves_seed=3) for s in range(3))
    assert first.sum() == 5 and second.sum() == 6
    assert np.array_equal(first, ~second)
    assert not np.array_equal(first, third)  # the next pair has its own permutation
