"""Block-index arithmetic shared by the kernels, kept off the integer divider where it can be.

A division by a runtime int builds to about 40 instructions (sm_90) ahead of the loads whose
addresses it gives, at the start of every CTA. With one group or one batch entry the quotient is
known, so a uniform branch skips it.
"""


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
