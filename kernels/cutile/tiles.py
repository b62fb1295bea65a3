"""Tile-size helpers shared by the host wrappers."""


def pow2_tile(n: int) -> int:
    """Smallest power of two >= max(n, 16): tile dimensions must be powers of two, and the
    tensor-core mma needs at least 16 along each dimension."""
    return max(16, 1 << (n - 1).bit_length())
