"""Launch configuration of the cuTile SSD kernels: tile sizes and occupancy hints.

One frozen dataclass so a configuration can be searched, cached as JSON and recorded beside every
result. Sizes larger than a problem's dimension are clamped by the host wrappers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields, replace


@dataclass(frozen=True)
class SSDConfig:
    # chunk_cumsum: heads per CTA.
    cumsum_heads: int = 8
    # fwd_pass_state: dstate columns per CTA, sequence rows per mma step, CTAs per SM (0 = auto).
    state_block_n: int = 64
    state_block_q: int = 64
    state_occupancy: int = 0
    # fwd_pass_state: runs of chunks walked in parallel (0 = enough to fill the GPU).
    state_segments: int = 0
    # fwd_pass_state: decay weights applied to x (1) or to B (0, Triton's order), which decides
    # which mma operand is computed in registers; heads per CTA sharing each B tile (1 or 2).
    state_weight_x: int = 0
    state_heads: int = 1
    # fwd_pass_state reads its per-position weights exp(dA_last − dA)·dt from chunk_cumsum (1),
    # which computes them once, or computes them itself at every step (0).
    state_weights: int = 0
    # fwd_pass_state stores each chunk's state as tileiras picks, by TMA where legal (1), or with
    # plain stores (0: `allow_tma=False`; fewer instructions in some builds, more in others).
    state_store_tma: int = 1
    # compute_out: output rows per CTA, causal k-tile, dstate slice per mma, CTAs per SM, heads
    # per CTA sharing one C·Bᵀ (1 or 2; 1 when heads per group is odd).
    out_block_m: int = 64
    out_block_k: int = 64
    out_slice_n: int = 128
    out_occupancy: int = 2
    out_heads: int = 1
    # compute_out computes C·Bᵀ itself (0) or reads it from chunk_cb, which computes it once per
    # group and stores it in fp32 (1), rounded to the input dtype (2), or in fp16 with each tile
    # scaled to a peak of 2^14 and its inverse scale stored beside it (3); 2 and 3 halve the
    # traffic, and 3 keeps three mantissa bits more than bf16.
    out_cb: int = 0
    # compute_out: k-tiles wholly before the row block take their decay as a row times a column
    # factor (1: TK exponentials per tile) or one exponential per element (0).
    out_rank1: int = 0
    # Latency hints (1-10: how much DRAM traffic a load expects; higher asks for deeper
    # prefetching) of the loads inside the loops: x and B in the state walk, x in compute_out.
    state_latency: int = 4
    out_latency: int = 4
    # compute_out's k-loop loads each tile's dA and dt with that loop's latency hint (1) or
    # unhinted (0).
    out_hint_decays: int = 0
    # compute_out with segments: the segment's start state added to the carried state before one
    # mma per dstate slice (1), or multiplied by C in a second product (0).
    out_fold_segments: int = 0
    # compute_out as one CTA per whole chunk (up to CHUNK_KERNEL_MAX_Q rows) walking this many
    # heads of a group in a loop over the chunk's one C·Bᵀ (0: CTAs of out_block_m rows). The
    # chunk kernel ignores out_block_m, out_block_k, out_heads, out_cb and out_rank1.
    out_chunk_heads: int = 0
    # The state walk, segment_scan, chunk_cb and compute_out's row-block kernel are launched as
    # programmatic dependents of the kernel before them (1: scheduled while that one finishes,
    # kernels/cutile/launch.py) or plainly (0).
    dependent_launch: int = 1
    # An unsegmented walk of whole-dstate walkers (one head each, state_block_n ≥ dstate) writes
    # each chunk's carried output C·hᵀ (b, l, h, p) instead of its state, and compute_out reads
    # those rows in place of its C·hᵀ product (1); otherwise, or with segments, the states (0).
    state_carry: int = 0
    # Where compute_out reads chunk_cb's C·Bᵀ and a one-segment walk leaves SMs idle in its one
    # wave, those SMs compute it during the walk, a kernel on a second stream launched before the
    # walk (1), instead of chunk_cb after it (0).
    state_cb: int = 0
    # Where the walk writes C·hᵀ rows (state_carry), compute_out runs before it and leaves out
    # without them, and each walk step adds its rows to out in place (1), so that compute_out
    # does not read them; or the walk stores the rows and compute_out after it reads them (0).
    state_out: int = 0
    # Where compute_out runs before the walk (state_out) and reads chunk_cb's C·Bᵀ, chunk_cb,
    # which needs nothing of chunk_cumsum's, runs beside it on a second stream (1) instead of
    # after it (0).
    cumsum_cb: int = 0
    # chunk_cb's CTAs per SM (0 = the compiler's choice: at dstate 256 one CTA of 255 registers
    # and 256 threads, an SM's whole register file, which nothing can run beside).
    cb_occupancy: int = 0

    def __post_init__(self) -> None:
        """Reject values no launch can use (a hand-edited or foreign tuning cache, say)."""
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValueError(
                    f"SSDConfig.{f.name} must be a non-negative integer, got {value!r}"
                )
        for name in (
            "cumsum_heads",
            "state_block_n",
            "state_block_q",
            "out_block_m",
            "out_block_k",
            "out_slice_n",
        ):
            value = getattr(self, name)
            if value < 1 or value & (value - 1):
                raise ValueError(f"SSDConfig.{name} must be a power of two, got {value}")
        for name in ("state_occupancy", "out_occupancy", "cb_occupancy"):
            if getattr(self, name) > 32:
                raise ValueError(
                    f"SSDConfig.{name} must be 0 (auto) to 32, got {getattr(self, name)}"
                )
        for name in ("state_latency", "out_latency"):
            if not 1 <= getattr(self, name) <= 10:
                raise ValueError(f"SSDConfig.{name} must be 1 to 10, got {getattr(self, name)}")
        if self.out_heads not in (1, 2):
            raise ValueError(f"SSDConfig.out_heads must be 1 or 2, got {self.out_heads}")
        for name in (
            "state_weight_x", "dependent_launch", "out_hint_decays", "out_rank1",
            "out_fold_segments", "state_weights", "state_store_tma", "state_carry", "state_cb",
            "state_out", "cumsum_cb",
        ):  # fmt: skip
            if getattr(self, name) not in (0, 1):
                raise ValueError(f"SSDConfig.{name} must be 0 or 1, got {getattr(self, name)}")
        if self.out_cb not in (0, 1, 2, 3):
            raise ValueError(f"SSDConfig.out_cb must be 0 to 3, got {self.out_cb}")
        if self.state_heads not in (1, 2):
            raise ValueError(f"SSDConfig.state_heads must be 1 or 2, got {self.state_heads}")

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    @classmethod
    def from_dict(cls, values: dict) -> SSDConfig:
        """A config as recorded (result rows, the tuning cache); a field since removed is read
        only at the value that launches as configs do now (RETIRED)."""
        if not isinstance(values, Mapping):
            raise TypeError(f"a recorded SSDConfig must be a mapping, got {type(values).__name__}")
        values = dict(values)
        for name, now in RETIRED.items():
            if name in values and values.pop(name) != now:
                raise ValueError(f"SSDConfig.{name} was removed; only {name}={now} still launches")
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise ValueError(f"unknown SSDConfig field(s) {sorted(unknown)}")
        return cls(**values)


#: Fields of configs recorded by older runs, and the value at which they launched as now: the walk's
#: eight worker warps (state_warps=8, 2.2-3.4x slower at dstate 256, run 229) are gone.
RETIRED = {"state_warps": 0}


DEFAULT_CONFIG = SSDConfig()

# compute_out_chunk_kernel holds a whole chunk's (Q, Q) C·Bᵀ tile in registers; longer chunks run
# the row-block kernel whatever out_chunk_heads says.
CHUNK_KERNEL_MAX_Q = 128


def compute_out_tiles(config: SSDConfig, chunk_size: int) -> tuple[int, int]:
    """(rows per CTA, causal k-tile) of compute_out, clamped to the chunk; chunk_cb tiles alike."""
    tm = min(config.out_block_m, chunk_size)
    return tm, min(config.out_block_k, tm)


def uses_chunk_kernel(config: SSDConfig, chunk_size: int) -> bool:
    """Whether compute_out runs compute_out_chunk.py's kernel (whole chunks) for this chunk."""
    return bool(config.out_chunk_heads) and chunk_size <= CHUNK_KERNEL_MAX_Q


def reads_chunk_cb(config: SSDConfig, chunk_size: int) -> bool:
    """Whether compute_out reads C·Bᵀ computed before it (by chunk_cb, after the walk or, with
    `state_cb`, beside it) rather than computing it itself."""
    return bool(config.out_cb) and not uses_chunk_kernel(config, chunk_size)


@dataclass(frozen=True)
class ProblemSize:
    """The sizes of a problem a default configuration depends on, besides dstate."""

    batch: int
    seqlen: int
    nheads: int
    chunk_size: int

    @property
    def output_tiles(self) -> int:
        """(chunk, head) tiles of the output: how much work compute_out spreads over the GPU."""
        return self.batch * self.nheads * -(-self.seqlen // self.chunk_size)

    @property
    def positions(self) -> int:
        """Sequence positions times heads: how much work the whole forward does, whatever the
        chunk length."""
        return self.batch * self.seqlen * self.nheads


# Below this many (chunk, head) output tiles, chunk_cb's extra launch costs more than computing
# C·Bᵀ inside compute_out (H200, dstate 256: −13 % at 128 tiles, ±3 % at 512, +1.5 to +4.8 %
# at 1024-2048 without it; docs/performance.md, change 12).
CB_MIN_TILES = 1024

# At dstate 256 with chunks up to CHUNK_KERNEL_MAX_Q, from this many output tiles on (four heads
# per CTA over CHUNK_MIN_CTAS CTAs) the chunk kernel beats computing C·Bᵀ inside compute_out
# (H200, chunk 128: −5.6 % at 2K/32/256 and −5.9 % at 1K/64/256 with 512 tiles; at 1K/32/256,
# 256 tiles, two heads per CTA +4 %, four +18 %; docs/performance.md, change 39).
CHUNK_MIN_TILES = 512

# Short problems: up to this many positions × heads. There the launch gaps PDL removes are a
# visible share of the forward (H200: −5 to −8 % at 1K-2K/32/64, −2 % at 1K/32/128; chaining
# compute_out too, a further −1 to −5 %, change 34); with change 20's kernels, from 4K/32 on its
# wait and release cost more than they saved (+5 % at 4K/32/128, +10 to +13 % at 4K-16K/32/256
# with 64-column walkers, +3 % at 64K/64/256; docs/performance.md). CHAIN_SEQLEN goes further.
SHORT_POSITIONS = 65536

# Sequences up to CHAIN_SEQLEN with up to CHAIN_POSITIONS positions × heads chain their launches
# too, the other knobs staying those of long problems (H200, chunk 128: −1.4 to −3.6 % at 1K/128
# and 2K/64 with dstate 64-256, change 41; −0.3 to −4.1 % at 2K/128, −1.5 to −2.1 % at 4K/64,
# ±0.0 and −0.5 % at 4K/32 with dstate 64 and 128, change 42; docs/performance.md). Not where the
# dstate-256 walk keeps 64-column walkers at two per SM (4K/32/256: +9.9 %; change 20 saw +10 to
# +13 % from 4K to 16K there).
CHAIN_SEQLEN = 4096
CHAIN_POSITIONS = 262144

# At dstate 256, more walkers of 64 state columns than this (two CTAs per SM on an H200's 132 SMs)
# run in two waves, each as long as the whole walk; walkers of 128 columns halve them into one
# (H200, chunk 128: 64K/128/256 walk 1.369 → 1.115 ms, −6.6 % in all; 16K/128/256 −8.7 %;
# docs/performance.md, change 33). Where 128-column walkers fit one per SM (up to half this
# many), they run so, each built with up to 255 registers: from FULL_WALKERS of them (64 heads:
# −7.6 to −8.0 % in all from 8K to 64K, −5.5 % at 2K), and for short problems with fewer (32
# heads: −9.6 % at 1K, −10.9 % at 2K against 32-column walkers); longer walks of fewer keep 64
# columns at two per SM (4K-64K/32/256: +3.9 to +5.6 % with 128; change 39).
WAVE_WALKERS = 264

# Sequences up to this long walk each state slice in one segment: segment_scan's launch costs
# more than a walk of at most 8 chunks of 128. At dstate 128, of 64-column walkers (H200: −4.4 %
# at 1K/32/128, −1 % at 1K/64/128; +14 % at 2K/32/128) taking 128 rows per mma step (−4.8 % at
# 1K/32/128, −5.6 % at 1K/64, −1.8 % at 1K/128; docs/performance.md, changes 24 and 25). At
# dstate 64, chunk 256: −6.6 % at 1K/32/64, −8.0 % at 1K/64/64; at 2K from +5.3 % (32 heads) to
# −4.1 % (128 heads) (change 30).
SHORT_WALK = 1024

# Up to dstate 128, this many walkers or more (batch × heads, one state block each) fill an
# H200's 132 SMs at about one CTA each, so the walk runs in one segment: no segment_scan, and no
# CTA of compute_out reads a segment's start state (folded in at dstate 64, a second product at
# 128), which saves it 12-15 %, more than the longer walk costs (H200, chunk 128, 128 heads
# against two segments: −5.9 to −8.6 % in all from 2K to 64K at dstate 64 and 128). With 32 or 64
# heads, one segment of narrower walkers, 128 of them, lost 13-52 % (docs/performance.md,
# change 36). At dstate 256 it counts walkers of 128 state columns (two per head; WAVE_WALKERS).
FULL_WALKERS = 128

# Up to dstate 64, walks of at most this many walkers (a quarter of an H200's SMs, one head each)
# up to 2 * SHORT_WALK over chunks of 128 take the loads' latency hint 2 (H200: −2.9 to −3.8 % in
# four runs at 1K/32/64, −2.2 to −2.7 % in three at 2K/32/64; at 4K, with 64 or 128 heads, or
# over chunks of 256 −0.7 to +1.1 %; docs/performance.md, change 52). At dstate 128 beyond
# CHAIN_SEQLEN over chunks of 128, at most this many walkers (batch × heads) take 64 state columns
# each at two per SM, half the segments of 128-column ones (8K/32/128: −3.0 to −3.5 %, change 63).
FEW_WALKERS = 32

# The chunk kernel at dstate 256 takes the most heads per CTA, up to CHUNK_MAX_HEADS, that leave
# at least CHUNK_MIN_CTAS CTAs: one fits per SM (168 registers, 8 worker warps), and fewer CTAs
# than an H200 has SMs (132) lost (H200, chunk 128, against v12's defaults: 64K/64/256 −7.2 % with
# 64 heads, 16K/32/256 −8.5 % with 32, 4K/32/256 −10.8 % with 8 but +18 % with 16;
# docs/performance.md, change 32).
CHUNK_MIN_CTAS = 128
CHUNK_MAX_HEADS = 64

# Short problems (SHORT_POSITIONS) of at most this many heads take 4 heads per chunk_cumsum CTA
# instead of 8 (H200, 32 heads at 1K-2K: −1.1 to −3.4 % in all over chunks of 128 in two passes,
# −2.0 to −3.3 % over 256; beyond, 4K/32/64 −2.1 % but 4K/32/128 +1.7 to +2.5 % and 8K/32/64 +1.1
# to +1.3 %, ±0.5 % elsewhere to 64K; 1K/64/64 +4.7 to +6.2 % with 4, 2 or 1; 16 per CTA +0.6 % at
# 64K/128/64; docs/performance.md, change 61).
FEW_CUMSUM_HEADS = 32


def default_config(dstate: int, size: ProblemSize | None = None) -> SSDConfig:
    """The untuned launch configuration for a state size and a problem's size (None: a large
    problem). docs/performance.md has the evidence.

    Short problems (SHORT_POSITIONS), and sequences up to CHAIN_SEQLEN of up to CHAIN_POSITIONS,
    chain their launches by PDL (the latter not with dstate 256's 64-column walkers).

    The state walk puts the decay weights on x, so the operand computed in registers is the mma's
    left one (1.75-2.25x faster walks on the H200 than weights on B), and reads those weights from
    chunk_cumsum rather than taking an exponential per position on its serial chain (−8 % at
    16K-64K/32/256, −3.5 % at 1K/32, change 44; not the segmented walks at dstate 64 beyond
    CHAIN_SEQLEN, changes 46 and 48, but those up to twice it over chunks of 128, change 60), with
    two CTAs per SM; with the loads' latency hint of each walk build's fastest pipeline where one
    was measured faster than the default's (changes 49 and 50, beyond CHAIN_SEQLEN and at some
    shorter walks, most over chunks of 128 only); whole chunks per mma step up to dstate 64, in one
    segment up to SHORT_WALK, with FEW_WALKERS or fewer up to twice SHORT_WALK over chunks of 128 at
    latency 2 (change 52), more up to SHORT_WALK one per SM at 2 in 128-row steps (change 62), and
    walkers that fill the GPU one per SM running so, with plain stores at latency 6 (change 53), as
    do the other segmented walks up to CHAIN_SEQLEN over chunks of 128, in half the segments
    (change 59), and up to twice it with PDL (change 60); at 128, 128 state
    columns per CTA, or one segment of 64-column walkers taking 128 rows per step up to SHORT_WALK,
    and for short problems over chunks up to 128 one segment of 64 columns at one CTA per SM taking
    whole chunks where they fit one wave (change 57), otherwise 128 columns at one per SM (change
    40; in one segment only over chunks up to 128, change 47), with its loads at latency 2 (−1.5 %
    in all at 64K/128/128, change 24); over chunks of 128, 64-column walkers at one per SM taking
    whole chunks at 6 where twice the walkers fill the GPU in one wave (one segment) and up to
    CHAIN_SEQLEN (change 55), and beyond it for up to FEW_WALKERS walkers 64-column ones at two per
    SM taking whole chunks at 8 (change 63); up to 128, one segment where FULL_WALKERS walkers fill
    the GPU (at 128 one CTA per SM where they fit, with chunk_cb and hinted decays, the tuner's pick
    at 64K/128/128, change 36); from 256 on one segment (the walkers already fill the GPU, and the
    segment correction would cost compute_out ~14 %), over chunks of 128 with 64 state columns per
    CTA at one CTA per SM taking whole chunks where such walkers fill the GPU in one wave (change
    56); otherwise with 128 state columns per CTA at one CTA per SM where such walkers fit in one
    wave and fill the GPU or the problem is short, 128 at two per SM where 64 would need a second
    wave, and 64 otherwise; at 256 over chunks of 128, where one walker per head fills the GPU
    one per SM, walkers of the whole state that write each chunk's C·hᵀ instead (change 70).

    compute_out, whose CTAs wait on their first loads, so that more CTAs per SM pay where they
    fit without spills (change 21):
    - up to dstate 64: four CTAs per SM of one head, the x loads of its loop at latency 8 (−1.7
      to −2.9 % in all, change 24), the segment's start state folded into the carried state's
      product (−1.4 to −2.6 %; at 128 pairs of heads fold at 167 registers, 2x slower, and one
      head loses 18–22 %; change 31);
    - at 128, CTAs for a pair of heads sharing their C·Bᵀ tiles (−0.6 to −7.5 % against one
      head; at 64 a loss): three per SM with 32-column causal k-tiles over chunks of 256
      (64K/128/128: −15 % against two with 64-column ones, before change 68), 64-column k-tiles
      over chunks of 128 (change 69), two per SM for short problems (1K/32/128: −2.5 %) and, at
      latency 2, where 64-column walkers run one per SM (below) up to twice SHORT_POSITIONS
      (change 55), for up to FEW_WALKERS walkers and for short walks (change 69);
    - at 256: for chunks up to CHUNK_KERNEL_MAX_Q with at least CHUNK_MIN_TILES output tiles,
      the chunk kernel, whose CTAs compute a chunk's C·Bᵀ once and walk `chunk_heads` heads over
      it (−6 to −11 % in all, change 32); for longer chunks with at least CB_MIN_TILES, chunk_cb
      computes C·Bᵀ once per group,
      and compute_out runs CTAs of one head with 32-column k-tiles, its loads at latency 2 (−1
      to −2 %), four CTAs per SM with the k-tiles' decays hinted too (−3.4 to −6 % in all
      against three with unhinted decays; four unhinted lost 10-13 %, change 29). With fewer
      tiles C·Bᵀ is computed inside, for pairs, two CTAs per SM. Where the walk writes C·hᵀ
      (change 70), pairs of heads over chunk_cb's C·Bᵀ at three per SM, as at 128.
    The row-times-column decay below the diagonal (`out_rank1`) in the row-block kernel
    everywhere (at 256 with C·Bᵀ computed inside it built 223 registers until compute_out peeled
    the diagonal tile: 2K/32/256 compute_out 32 → 53 µs then, −3.6 % in all now; change 54).

    chunk_cumsum takes 8 heads per CTA, 4 for short problems of up to FEW_CUMSUM_HEADS heads
    (change 61), before the short dstate-64 walks of more than FEW_WALKERS that run one per SM
    (change 62) and before change 57's short dstate-128 walks (change 64).
    """
    short = int(size is not None and size.positions <= SHORT_POSITIONS)
    chained = short or int(
        size is not None and size.seqlen <= CHAIN_SEQLEN and size.positions <= CHAIN_POSITIONS
    )
    walkers = 0 if size is None else size.batch * size.nheads
    long = size is None or size.seqlen > CHAIN_SEQLEN
    # Most latency hints of change 49 were measured faster over chunks of 128 only (run 98: 6 at
    # 16K-64K/128/128 over chunks of 256 +32 to +33 %; run 99: 2 at 16K-64K/32/256 +1.4 to +3 %).
    q128 = size is not None and size.chunk_size <= 128
    long_q128 = long and q128
    few_heads = short and size.nheads <= FEW_CUMSUM_HEADS
    walk = replace(
        DEFAULT_CONFIG, state_occupancy=2, state_weight_x=1, state_weights=1,
        dependent_launch=chained, cumsum_heads=4 if few_heads else 8,
    )  # fmt: skip
    if dstate <= 64:
        few_short = q128 and size.seqlen <= 2 * SHORT_WALK and walkers <= FEW_WALKERS
        # Short walks of more than FEW_WALKERS but fewer than FULL_WALKERS walkers over chunks of
        # 128 run one CTA per SM, 128 rows per step at latency 2, after chunk_cumsum with 4 heads
        # per CTA: the tuner's pick at 1K/64/64 (H200: −4.5 to −5.1 % in three runs, 1K/48/64
        # −3.6 %, 1K/96/64 −5.4 %; the walk alone −1.3 %, the pick with 8 heads per chunk_cumsum
        # CTA −0.4 %; +0.5 to +1.5 % at 1K/32/64 and 2K/32/64, +2.1 % at 2K/64/64, +1.4 to +3.4 %
        # at 1K/128/64; change 62).
        mid_short = q128 and size.seqlen <= SHORT_WALK and FEW_WALKERS < walkers < FULL_WALKERS
        if size is not None and (size.seqlen <= SHORT_WALK or walkers >= FULL_WALKERS):
            walk = replace(walk, state_segments=1)
            if FULL_WALKERS <= walkers <= WAVE_WALKERS // 2:
                # Walkers that fill the GPU one per SM run so, with plain state stores and the
                # loads at 6 (H200, 128 heads: −1.2 to −4.5 % in all from 1K to 64K over chunks
                # of 128 and −2.4 to −4.1 % over 256; the same at two per SM, in 64-row steps,
                # +0.4 to +5.6 %; change 53).
                walk = replace(walk, state_occupancy=1, state_store_tma=0, state_latency=6)
        elif q128 and not few_short and size.seqlen <= 2 * CHAIN_SEQLEN:
            # The other segmented walks up to twice CHAIN_SEQLEN over chunks of 128 run one CTA
            # per SM, which about halves their segments (_segments fills one wave of walkers):
            # the tuner's pick at 4K/32/64 (H200: −5.3 to −6.8 % at 4K/32/64, −1.9 to −5.3 % at
            # 2K/64/64, −2.8 % at 4K/64/64; half the segments at two per SM lost at 64 heads; at
            # 2K/32/64, same segments, +1.4 %; change 59). Beyond CHAIN_SEQLEN only with the
            # weights read and PDL (8K/32/64: −5.6 %, 8K/64/64 −0.7 %, 16K/32/64 −0.8 %; one per
            # SM alone +4.1 % at 8K/32/64, +8.6 % at 16K/64/64; change 60).
            walk = replace(walk, state_occupancy=1, dependent_launch=1 if long else chained)
        elif long:
            # Long segmented walks here are not bound by their chain, so chunk_cumsum's third
            # output costs more than it saves (H200, chunk 128: −0.4 to −1.2 % at 32K-64K with
            # 32 and 64 heads computing the weights in the walk, ±0.5 % at 16K; change 46); up to
            # CHAIN_SEQLEN reading them pays (chunk 256: −2.2 to −4.2 % at 2K-4K, +0.3 % at 8K;
            # chunk 128: −1.0 to +0.1 %; change 48).
            walk = replace(walk, state_weights=0)
        if mid_short:
            walk = replace(walk, state_occupancy=1, cumsum_heads=4)
        return replace(
            walk, state_block_q=128 if mid_short else 256, out_occupancy=4, out_rank1=1,
            out_latency=8, out_fold_segments=1,
            state_latency=2 if few_short or mid_short else walk.state_latency,
        )  # fmt: skip
    if dstate <= 128:
        if short:
            out = {"out_occupancy": 2}
        elif not q128:
            out = {"out_occupancy": 3, "out_block_k": 32}
        elif walkers <= FEW_WALKERS or size.seqlen <= SHORT_WALK:
            # Over chunks of 128, after change 68, 64-column k-tiles: at two CTAs per SM at 2 for
            # up to FEW_WALKERS walkers and short walks of more (H200, runs 196 and 198: −2.9 to
            # −3.8 % at 8K-64K/32/128, −6.0 % at 1K/128/128), at three per SM elsewhere (−3.1 to
            # −4.0 % at 4K-64K/64/128, −6.2 to −8.3 % at 2K-64K/128/128 with chunk_cb, where two
            # per SM at 2 was +4.5 % at 8K/128/128 in run 195; change 69).
            out = {"out_occupancy": 2, "out_latency": 2}
        else:
            out = {"out_occupancy": 3}
        latency = 2
        fill_one_per_sm = FULL_WALKERS <= 2 * walkers <= WAVE_WALKERS // 2  # of 64 columns
        if size is not None and size.seqlen <= SHORT_WALK:
            walk = replace(walk, state_segments=1, state_block_n=64, state_block_q=128)
        elif walkers >= FULL_WALKERS:
            walk = replace(walk, state_segments=1, state_block_n=128)
            # Where they fit one per SM, that hint builds a walk of 255 registers, 9 % faster than
            # two per SM's (64K/128/128: 0.700 against 0.768 ms); C·Bᵀ from chunk_cb with hinted
            # decays, −1.5 % at 32K/128/128 (change 35).
            if walkers <= WAVE_WALKERS // 2:
                # Beyond CHAIN_SEQLEN over chunks of 128 the SMs this wave leaves free compute
                # C·Bᵀ beside the walk instead of chunk_cb after it (H200, run 213: −1.0 % at
                # 8K/128/128, −1.2 % at 64K; over chunks of 256 +1.0 % at 64K; change 76).
                walk = replace(walk, state_occupancy=1, state_cb=int(long_q128))
                if q128:
                    # This build pipelines its loads deeper at 6 than at 2 (207 against 164 KB of
                    # shared memory): −3.6 to −4.6 % at 8K-64K/128/128, the walk 0.681 → 0.571 ms
                    # at 64K (change 49), −3.5 to −3.6 % at 2K-4K/128/128 (change 50).
                    latency = 6
            out.update(out_cb=1, out_hint_decays=1)
        elif q128 and not short and (fill_one_per_sm or size.seqlen <= CHAIN_SEQLEN):
            # 64-column walkers one per SM, whole chunks per step, at 6: where they fill the GPU
            # so they walk in one segment instead of several and compute_out runs unsegmented
            # (H200, 64 heads: −8.4 % at 4K, −6.6 % at 8K, −2.5 % at 64K); up to CHAIN_SEQLEN at
            # 32 heads two segments instead of eight (4K: −8.5 to −9.0 %; beyond, +2.7 % at 16K
            # and +5.8 % at 64K). Up to twice SHORT_POSITIONS compute_out takes square k-tiles at
            # two CTAs per SM too (the tuner's pick at 4K/32/128: −12.4 to −12.7 % in all; 2K/64
            # −15.7 %; at 4K/64 +2.5 % and at 8K/64 +2.6 % over the walk alone; change 55).
            walk = replace(walk, state_block_n=64, state_block_q=128, state_occupancy=1)
            latency = 6
            if size.positions <= 2 * SHORT_POSITIONS:
                out = {"out_occupancy": 2, "out_latency": 2}
        elif long_q128 and walkers <= FEW_WALKERS:
            # Beyond CHAIN_SEQLEN, up to FEW_WALKERS walkers take 64 columns at two CTAs per SM,
            # whole chunks per step, at 8: half the segments of 128-column ones, so segment_scan
            # is shorter (the tuner's pick at 8K/32/128, runs 150-153: −2.7 to −3.5 % at 8K/32,
            # −1.5 % at 16K, −1.0 % at 32K, −0.8 % at 64K; the pick's compute_out knobs on top
            # −0.6 % at 8K, +0.2 to +0.5 % at 16K-32K; at 8K/64 the pick +5.3 %, at 4K/32 +2.4 %;
            # change 63).
            walk = replace(walk, state_block_n=64, state_block_q=128)
            latency = 8
        else:
            walk = replace(walk, state_block_n=128)
        if short and q128 and 2 * walkers <= WAVE_WALKERS // 2:
            # Short walks over chunks of 128 whose 64-column walkers fit one wave at one CTA per
            # SM run so, in one segment, whole chunks per step: the walk of the tuner's pick at
            # 1K/32/128 (H200, against 128-column walkers one per SM: −11.0 % in all at
            # 1K/32/128, the walk 11 → 8 µs; −8.3 % at 1K/64/128; −6.7 % at 2K/32/128, one
            # segment instead of several, no segment_scan). The pick's compute_out latency 6
            # added nothing (change 57). chunk_cumsum before them takes 4 heads per CTA (the
            # walk starts sooner: −1.8 to −2.2 % in three runs at 1K/64/128, −1.9 % at 1K/48/128;
            # outside these walks −0.6 % at 1K/128/128 and +1.0 % at 2K/64/128; runs 144, 146
            # and 154, change 64).
            walk = replace(
                walk, state_block_n=64, state_block_q=128, state_segments=1, state_occupancy=1,
                cumsum_heads=4,
            )  # fmt: skip
        elif short and not (size.seqlen <= SHORT_WALK and size.chunk_size > 128):
            # Other short walks of 128 columns at one CTA per SM (up to 255 registers) beat two
            # per SM's (H200, chunk 128, before change 57: −9.9 to −10.9 % at 1K/64/128, −2.5 to
            # −3.5 % at 2K/32/128; change 40), but not one segment over chunks of 256 (1K/32/128
            # +15 %, 1K/64/128 +8 %; change 47).
            walk = replace(walk, state_block_n=128, state_occupancy=1)
        return replace(walk, state_latency=latency, out_heads=2, out_rank1=1, **out)
    walk = replace(walk, state_block_n=64, state_block_q=256, state_segments=1)
    wide = walkers * 2  # walkers of 128 state columns
    # The walks beyond CHAIN_SEQLEN take the latency hint whose build was fastest (change 49,
    # H200): 8 for 128-column walkers at one per SM (64 heads: −1.7 to −3.1 % at 8K-64K over
    # chunks of 128, −16 to −18 % over 256, where the default hint's build has 123 KB of shared
    # memory against 220; up to CHAIN_SEQLEN 8 lost 10-12 % over 256) and, over chunks of 128,
    # at two per SM (128 heads: −0.1 to −1.3 %); 2 for 64-column ones over 128 (32 heads: −0.9
    # to −2.0 %). Up to CHAIN_SEQLEN over chunks of 256 the one-per-SM build at 4 spills 48 B and
    # 2's does not: −7.2 % at 1K-2K/32/256, −4.9 to −6.3 % at 1K-4K/64/256 (change 50).
    if q128 and FULL_WALKERS <= 4 * walkers <= WAVE_WALKERS // 2:
        # 64-column walkers that fill the GPU one per SM run so, whole chunks per step, at 6
        # (H200, 32 heads over chunks of 128: −10.6 % at 1K, −12.7 % at 2K, −5.3 % at 4K, −2.4 %
        # at 8K, −3.9 % at 16K, −4.6 % at 32K, −4.9 to −5.1 % at 64K; over chunks of 256 +3.8 %
        # at 16K; change 56), with PDL only for short problems, as at two per SM (below).
        walk = replace(
            walk, state_block_n=64, state_block_q=128, state_occupancy=1, state_latency=6,
            dependent_launch=short,
        )  # fmt: skip
    elif size is not None and wide <= WAVE_WALKERS // 2 and (short or wide >= FULL_WALKERS):
        latency = 8 if long else 4 if q128 else 2
        walk = replace(walk, state_block_n=128, state_occupancy=1, state_latency=latency)
    elif walkers * 4 > WAVE_WALKERS:  # of 64 columns
        walk = replace(walk, state_block_n=128, state_latency=8 if long_q128 else 4)
    elif not short:  # 64-column walkers, two per SM: PDL's wait and release cost more than it saves
        walk = replace(walk, dependent_launch=0, state_latency=2 if long_q128 else 4)
    if carry_walkers(dstate, size):
        # One walker per head, over its whole state, where they fill the GPU one per SM: each
        # chunk's C·hᵀ rows (half its state's bytes at dstate 256) instead of its state, and
        # compute_out reads them in place of its largest product, for pairs of heads over
        # chunk_cb's C·Bᵀ at three CTAs per SM (H200, 128 heads over chunks of 128, against
        # 128-column walkers two per SM and the chunk kernel: −2.0 % at 1K, −2.8 % at 2K, −5.5 to
        # −5.7 % at 4K-8K, −7.5 to −7.6 % at 16K, −8.3 to −8.4 % at 32K, −9.7 to −10.6 % at 64K,
        # the walk +3 to +15 % and compute_out with chunk_cb −9 to −19 %; the chunk kernel
        # reading the rows +14 to +16 %; 64 heads, 64 such walkers, +33 % at 16K; change 70).
        # Beyond CHAIN_SEQLEN that walk's loads at 6 build fewer instructions than at 8 (2,144
        # against 2,512; 24 B of spills against 8): the walk −3.7 to −4.5 %, the forward −1.7 to
        # −2.0 % at 8K-64K/128/256; at 1K-4K 6 against 4 +1.4 % to −0.2 %; 2 builds 255
        # registers, the walk +60 to +63 % (runs 202-204, change 71); at 6 its rows take turns
        # between two stores, the forward −0.7 to −1.1 % at 8K-64K (H100, runs 239-242; on an
        # H200 the walk −0.5 to −1.0 %, the forward within noise, run 244; change 84; at 4 that
        # builds another walk, +13 to +21 %). Beyond CHAIN_SEQLEN the four SMs the walkers
        # leave free compute C·Bᵀ beside the walk instead of chunk_cb after it
        # (run 213: −1.0 % at 16K/128/256, −0.8 % at 64K; +2.9 % at 2K; change 76). C·Bᵀ in fp16
        # scaled per tile: compute_out −6 to −8 %, the forward −4.2 to −4.4 % in graph mode and
        # −2.2 to −6.7 % in eager mode at 8K-64K, −1.5 % at 1K and −3.6 % at 4K; the error
        # 1.997e-3 → 2.001e-3, where bf16 gives 2.24e-3 (runs 232-233, change 80).
        return replace(
            walk, state_carry=1, state_block_n=256, state_occupancy=1, out_cb=3, out_heads=2,
            out_occupancy=3, out_rank1=1, out_latency=4, out_hint_decays=1,
            state_latency=6 if long else walk.state_latency, state_cb=int(long),
        )  # fmt: skip
    whole_chunks = size is not None and size.chunk_size <= CHUNK_KERNEL_MAX_Q
    if whole_chunks and size.output_tiles >= CHUNK_MIN_TILES:
        return replace(walk, out_chunk_heads=chunk_heads(size), out_occupancy=1, out_latency=2)
    if size is None or size.output_tiles >= CB_MIN_TILES:
        return replace(
            walk, out_cb=1, out_rank1=1, out_heads=1, out_latency=2, out_hint_decays=1,
            out_occupancy=4, out_block_k=32,
        )  # fmt: skip
    # With the diagonal tile peeled (compute_out.py) these pairs take the row factor too, which
    # built 223 registers before, 128 now (H200, chunk 256: −2.3 to −5.1 % at 1K/32, 1K/64 and
    # 2K/32; change 54).
    return replace(walk, out_occupancy=2, out_heads=2, out_rank1=1)


def carry_walkers(dstate: int, size: ProblemSize | None) -> bool:
    """Whether the walk runs one walker per head over its whole state and writes each chunk's
    C·hᵀ (state_carry): at dstate 256 over chunks of 128 (the only length measured), where such
    walkers, batch × heads of them, fill the GPU at one per SM in one wave."""
    return (
        size is not None
        and 128 < dstate <= 256
        and size.chunk_size == 128
        and FULL_WALKERS <= size.batch * size.nheads <= WAVE_WALKERS // 2
    )


def chunk_heads(size: ProblemSize) -> int:
    """Heads per CTA of compute_out_chunk_kernel: the most, up to CHUNK_MAX_HEADS, that leave
    CHUNK_MIN_CTAS CTAs (the launch lowers it to a divisor of the heads per group)."""
    heads = CHUNK_MAX_HEADS
    while heads > 1 and size.output_tiles < heads * CHUNK_MIN_CTAS:
        heads //= 2
    return heads


def forward_default_config(x_shape: tuple[int, ...], dstate: int, chunk_size: int) -> SSDConfig:
    """default_config for a forward whose x is (batch, seqlen, nheads, headdim)."""
    batch, seqlen, nheads = x_shape[:3]
    return default_config(dstate, ProblemSize(batch, seqlen, nheads, chunk_size))


def inputs_default_config(kwargs: dict) -> SSDConfig:
    """forward_default_config of a forward's keyword arguments (x, B, chunk_size)."""
    return forward_default_config(kwargs["x"].shape, kwargs["B"].shape[3], kwargs["chunk_size"])


_HINTED: dict[tuple[int, int], object] = {}


def with_occupancy(kernel, occupancy: int):
    """The kernel with an occupancy hint (0 = the compiler's choice); each keeps its JIT cache."""
    if occupancy == 0:
        return kernel
    key = (id(kernel), occupancy)
    if key not in _HINTED:
        _HINTED[key] = kernel.replace_hints(occupancy=occupancy)
    return _HINTED[key]
