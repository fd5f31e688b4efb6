"""available_cores: the affinity mask where the platform has one."""

import os

import pytest

from lightfed.run import cores
from lightfed.run.cores import available_cores


def test_the_affinity_mask_where_there_is_one():
    if not hasattr(os, "sched_getaffinity"):
        pytest.skip("no affinity mask on this platform")
    assert available_cores() == len(os.sched_getaffinity(0)) >= 1


def test_all_cores_where_there_is_no_mask(monkeypatch):
    monkeypatch.delattr(cores.os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(cores.os, "cpu_count", lambda: 7)
    assert available_cores() == 7
    monkeypatch.setattr(cores.os, "cpu_count", lambda: None)
    assert available_cores() == 1
