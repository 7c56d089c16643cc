import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


@pytest.fixture(autouse=True)
def _threads():
    torch.set_num_threads(1)  # small convolutions: 1 thread is faster on 2 cores
    yield
