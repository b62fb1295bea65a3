"""Decays in log2 units, shared by the kernels that apply them.

dA_cumsum is stored in natural-log units (as mamba_ssm keeps it); the kernels scale what they
load by log2 e and take every decay as one exp2. ct.exp's range reduction costs about six
instructions per element, and on compute_out's diagonal tiles that was a fifth of the kernel's
instructions (docs/performance.md, change 17).
"""

import cuda.tile as ct

LOG2E = 1.4426950408889634  # exp(x) = exp2(x·log2 e)


def exp2(x):
    """2**x of a decay exponent (x ≤ 0): results below 2**-126 flush to zero, far below any
    rounding the outputs see."""
    return ct.exp2(x, flush_to_zero=True)
