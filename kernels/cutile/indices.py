"""Block-index arithmetic shared by the kernels, kept off the integer divider where it can be.

A division by a runtime int builds to about 40 instructions (sm_90) ahead of the loads whose
addresses it gives, at the start of every CTA. With one group or one batch entry the quotient is
known, so a uniform branch skips it.
"""

import cuda.tile as ct

# Chunks a segmented problem may have for segment_of to be exact (kernels/cutile/compute_out.py
# checks it before launching).
MAX_SEGMENTED_CHUNKS = 2**20


def group_of(head, heads_per_group, ngroups):
    """The group of B and C that `head` reads: head // heads_per_group, 0 with one group."""
    group = 0
    if ngroups > 1:
        group = head // heads_per_group
    return group


def split_index(index, inner, outer_size):
    """(index // inner, index % inner) of a block axis that packs an outer index of `outer_size`
    values over an inner one of `inner`; (0, index) when the outer axis has one value."""
    outer = 0
    rest = index
    if outer_size > 1:
        outer = index // inner
        rest = index % inner
    return outer, rest


def segment_of(chunk, seg_len):
    """chunk // seg_len through one approximate float32 division instead of the integer divider.
    (chunk + 1/2) / seg_len lies at least 1/(2·seg_len) from an integer; the approximate
    division's relative error (2^-22 at most) keeps it on the same side while chunk + 1/2 < 2^21,
    twice MAX_SEGMENTED_CHUNKS, so its floor is the quotient."""
    quotient = ct.truediv(
        ct.astype(chunk, ct.float32) + 0.5,
        ct.astype(seg_len, ct.float32),
        rounding_mode=ct.RoundingMode.APPROX,
    )
    return ct.astype(ct.floor(quotient), ct.int32)
