"""GPU benchmark of the attack precision (issue 13 item 18): Table 14's cells (AutoAttack
robust accuracy at each epsilon for one trained model) under ``autoattack.precision`` fp32
(TF32 off) and tf32 (PyTorch's defaults, cuDNN TF32, as the authors' code ran).

    python workflow/scripts/bench_gpu_precision.py --model results/models/<ds>/<arch>/nodef/seed0/model.pt \\
        --dataset-root results/datasets/<ds>/private --epsilons 1e-5 0.0005 --device cuda

On CPU (or a GPU without TF32) it runs too, at any scale, but both settings compute the same
numbers there. Logic: :func:`atat.robustness.precision_benchmark_main`.
"""

import sys

import _common  # noqa: F401  (imports atat from this checkout)

from atat.robustness import precision_benchmark_main  # noqa: E402

sys.exit(precision_benchmark_main())
