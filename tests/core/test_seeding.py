"""Seeds derived for many clients at once are numpy's ``SeedSequence`` seeds, one client at a time."""

import numpy as np
import pytest

from lightfed.core.seeding import derived_seed, derived_seeds


@pytest.mark.parametrize("words", [50, 2**32], ids=["small", "32-bit"])
def test_seeds_derived_together_are_each_clients_own(words):
    rng = np.random.default_rng(0)
    for _ in range(40):
        seed = int(rng.integers(0, 2**32))
        key = [int(k) for k in rng.integers(0, words, size=int(rng.integers(0, 4)))]
        last = [0, *(int(k) for k in rng.integers(0, words, size=9))]
        assert derived_seeds(seed, *key, last=last) == [derived_seed(seed, *key, k) for k in last]


def test_words_of_more_than_32_bits_take_numpys_own():
    assert derived_seeds(3, 2**40, last=[1, 2**33]) == [derived_seed(3, 2**40, 1), derived_seed(3, 2**40, 2**33)]
    assert derived_seeds(3, 1, last=[]) == []
