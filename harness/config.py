"""Hydra structured configs of run_bench.py, and their validation before any GPU work.

The schema (BenchConfig and its groups) is registered in Hydra's ConfigStore as `bench_schema` and
is the first entry of conf/config.yaml's defaults, so every YAML file and command-line override
merges into typed nodes: an unknown key or a value of the wrong type fails at composition, naming
the key. `validate` then checks ranges and builds every sweep point as a `Problem`, so a bad point
fails with the field's name before a GPU is touched. `preflight` does all of that for every job
of a command line, multirun included.

A sweep is the product of the values given for each Problem field (a scalar or a list, so that
both `sweep.seqlen=[1024,4096]` and multirun's `-m sweep.seqlen=1024,4096` work), repeated for
each entry of an optional `points` list whose fields replace the sweep's (models.yaml).
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from enum import Enum
from pathlib import Path
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from harness import environment
from harness.problem import Problem, reference_gib
from harness.records import MODES
from harness.timing import TimingPolicy

CONF_DIR = Path(__file__).resolve().parents[1] / "conf"
PROBLEM_FIELDS = tuple(f.name for f in fields(Problem))
# Sweep order, outermost first: dtype, the other fields in Problem order, then nheads, dstate and
# seqlen; seqlen varies fastest, so neighbouring points share autotune keys.
_INNERMOST = ("nheads", "dstate", "seqlen")
_AXIS_ORDER = (
    "dtype",
    *(f for f in PROBLEM_FIELDS if f not in ("dtype", *_INNERMOST)),
    *_INNERMOST,
)
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class ConfigError(ValueError):
    """A configuration that cannot run; the message is one line naming the key."""


#: Timing modes (harness/timing.py), the values of records.MODES (the schema owns them).
Mode = Enum("Mode", {mode: mode for mode in MODES}, module=__name__)


class L2(Enum):
    cold = "cold"
    warm = "warm"


class Tune(Enum):
    """cuTile tuning: off (fixed configs), cached (reuse picks, tune when none), force (retune)."""

    off = "off"
    cached = "cached"
    force = "force"


class TritonAutotune(Enum):
    """once: Triton's picks persist across points with one autotune key (its own behaviour);
    per_point: they are forgotten before every point, so each point is tuned for its own shape;
    twice: per_point, and each point (at each chunk length) is tuned twice, both sets of picks
    are checked, and the one faster in a short screening of the whole forward is timed (the
    autotuner times each kernel alone, and its picks at µs-scale kernels vary between tunings)."""

    once = "once"
    per_point = "per_point"
    twice = "twice"


class ChunkPolicy(Enum):
    """The chunk length each provider runs at. fixed: the problem's chunk_size. fastest: per point
    and provider, whichever of chunk_size and chunk_size / 2 it runs faster (the SSD's output does
    not depend on the chunk length; it is a tuning knob like a tile size). Every length tried is
    checked against the reference; the choice and the screening times go into the tuning column."""

    fixed = "fixed"
    fastest = "fastest"


#: Settings added after runs were recorded, with the value those runs had; a resumed run and the
#: gate read a missing key as this value.
LEGACY_SETTINGS: dict[str, object] = {
    "chunk_policy": ChunkPolicy.fixed.value,
    # Runs before re-timing never re-timed; the floor and the cooldown then had no effect, so
    # they read as today's defaults.
    "timing.held_retimes": 0,
    "timing.held_floor": 0.95,
    "timing.held_cooldown_s": 10.0,
    # Runs before eager_after_self timed eager mode interleaved, as its default does.
    "timing.eager_after_self": False,
}


@dataclass
class SweepConfig:
    """Points to measure. Each Problem field takes a value or a list of values (None: Problem's
    default); dt_limit takes a [low, high] pair or a list of pairs."""

    name: str = MISSING
    batch: Any = None
    seqlen: Any = None
    nheads: Any = None
    headdim: Any = None
    dstate: Any = None
    ngroups: Any = None
    chunk_size: Any = None
    dtype: Any = None
    has_D: Any = None
    D_has_hdim: Any = None
    has_z: Any = None
    has_dt_bias: Any = None
    dt_softplus: Any = None
    dt_limit: Any = None
    has_initial_states: Any = None
    return_final_states: Any = None
    points: list[dict[str, Any]] | None = None


@dataclass
class TimingConfig(TimingPolicy):
    """Timing modes, L2 state, the stopping rule (fields of TimingPolicy) and what to do when the
    GPU's clock was held down as a mode's timing ended.

    A held clock (a clock-limiting reason of power, heat or slowdown active, such as the power
    cap, and the SM clock below held_floor of its max, read by nvidia-smi as the timing ends)
    times the clock, not the code: the mode is timed again, all its providers together, after
    held_cooldown_s idle, up to held_retimes times. The last timing is kept; the rows record how
    many there were (`timings`) and the clock read after the last.
    """

    modes: list[Mode] = field(default_factory=lambda: list(Mode))
    l2: L2 = L2.cold
    flush_mib: int = 512  # zeroed before every rep with a cold L2; at least twice the L2 is used
    held_retimes: int = 2
    held_floor: float = 0.95
    held_cooldown_s: float = 10.0


@dataclass
class ProvidersConfig:
    names: list[str] = MISSING


@dataclass
class CheckConfig:
    """Correctness check before timing: against the float64 reference when its estimated memory
    fits reference_max_gib (and it does not run out of memory), else against `fallback`."""

    reference_max_gib: float = 64.0
    fallback: str = "triton"


@dataclass
class ShardConfig:
    """This process's share of the sweep (harness/sharding.py): shard `index` of `count`. Every
    shard of one sweep must write into the same run, hence an explicit run_id when count > 1."""

    index: int = 0
    count: int = 1


@dataclass
class BenchConfig:
    sweep: SweepConfig = field(default_factory=SweepConfig)
    timing: TimingConfig = field(default_factory=TimingConfig)
    providers: ProvidersConfig = field(default_factory=ProvidersConfig)
    check: CheckConfig = field(default_factory=CheckConfig)
    shard: ShardConfig = field(default_factory=ShardConfig)
    run_id: str | None = None  # None: a new run named <sweep.name>-<UTC date-time>
    resume: bool = False  # with run_id None: continue the newest run of this same sweep
    results_dir: str = "results"  # runs go to <results_dir>/<gpu-slug>/<run_id>/
    seed: int = 0  # input seed of every point
    device: int = 0  # CUDA device index
    gpus: int = 1  # > 1: one shard per GPU of this node, in parallel (harness/local_gpus.py)
    # off: the per-dstate defaults every committed sweep ran. cached tunes each new shape first,
    # a minute or two per shape on the H200 (16K/64/128: 76 s with 32 CPUs compiling, 155 s with
    # 16 before spilling candidates were skipped), so it is asked for.
    tune: Tune = Tune.off
    triton_autotune: TritonAutotune = TritonAutotune.once
    chunk_policy: ChunkPolicy = ChunkPolicy.fixed
    # > 0: a point is started only if it can end within this many seconds of the sweep's start
    # (each shard on its own, judged by its longest point so far); the rest is left for a rerun
    # with the same run_id. For job time limits: the sweep stops between points, never inside one.
    time_limit_s: float = 0.0
    # A resume measures again the (point, provider) pairs recorded as `error` (a transient failure:
    # out of memory, a toolchain missing); off, it skips every pair recorded, whatever its status.
    retry_errors: bool = False
    progress: bool = True
    # Print what the sweep would measure (harness/plan.py) and stop: no GPU work, none needed.
    dry_run: bool = False


ConfigStore.instance().store(name="bench_schema", node=BenchConfig)


def _axis(name: str, value: Any) -> list:
    """The list of values a sweep field takes."""
    if isinstance(value, dict):
        raise ConfigError(f"sweep.{name} must be a value or a list of values, got a mapping")
    if not isinstance(value, (list, tuple)):
        return [value]
    if not value:
        raise ConfigError(f"sweep.{name} is an empty list")
    if name == "dt_limit" and not isinstance(value[0], (list, tuple)):
        return [value]  # one [low, high] pair
    if name != "dt_limit" and any(isinstance(v, (list, tuple, dict)) for v in value):
        raise ConfigError(f"sweep.{name} must be a value or a list of values, got {value}")
    return list(value)


def expand_points(sweep: SweepConfig) -> list[Problem]:
    """Every point of the sweep, validated, duplicates dropped, in sweep order."""
    problems: list[Problem] = []
    for i, entry in enumerate(sweep.points or [{}]):
        where = f"sweep.points[{i}]" if sweep.points else "sweep"
        unknown = sorted(set(entry) - set(PROBLEM_FIELDS))
        if unknown:
            raise ConfigError(
                f"{where}: unknown field(s) {unknown}; allowed: {list(PROBLEM_FIELDS)}"
            )
        chosen = {name: entry.get(name, getattr(sweep, name)) for name in _AXIS_ORDER}
        axes = {name: _axis(name, v) for name, v in chosen.items() if v is not None}
        for combo in itertools.product(*axes.values()):
            try:
                problem = Problem(**dict(zip(axes, combo, strict=True)))
            except (TypeError, ValueError) as exc:  # ProblemError names the field
                raise ConfigError(f"{where}: {exc}") from None
            if problem not in problems:
                problems.append(problem)
    return problems


def planned_points(meta: dict) -> list[str] | None:
    """Keys of every point a run's sweep asks for, from the sweep recorded in its meta (None
    where the meta has none): what a run cut short, or resumed, is measured against."""
    try:
        return [p.key() for p in expand_points(SweepConfig(**meta["config"]["sweep"]))]
    except (KeyError, TypeError, ConfigError):
        return None


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise ConfigError(message)


def validate(cfg: BenchConfig) -> list[Problem]:
    """Check every value the schema cannot; returns the sweep's points."""
    from harness import providers, stats

    conflict = environment.allocator_conflict()
    _check(conflict is None, str(conflict))
    t = cfg.timing
    _check(bool(t.modes), "timing.modes must name at least one mode")
    _check(len(set(t.modes)) == len(t.modes), f"timing.modes has duplicates: {t.modes}")
    _check(t.warmup >= 0, f"timing.warmup must be >= 0, got {t.warmup}")
    _check(
        t.min_reps >= stats.MIN_CI_SAMPLES,
        f"timing.min_reps must be >= {stats.MIN_CI_SAMPLES}, got {t.min_reps}: fewer samples have"
        " no 95 % interval of the median, which the CI target and the regression gate judge by",
    )
    _check(t.max_reps >= t.min_reps, f"timing.max_reps must be >= min_reps, got {t.max_reps}")
    _check(t.max_seconds > 0, f"timing.max_seconds must be > 0, got {t.max_seconds}")
    _check(0 < t.ci_target < 1, f"timing.ci_target must be in (0, 1), got {t.ci_target}")
    _check(t.kernels_batch >= 1, f"timing.kernels_batch must be >= 1, got {t.kernels_batch}")
    _check(t.flush_mib >= 0, f"timing.flush_mib must be >= 0, got {t.flush_mib}")
    _check(t.held_retimes >= 0, f"timing.held_retimes must be >= 0, got {t.held_retimes}")
    _check(0 < t.held_floor <= 1, f"timing.held_floor must be in (0, 1], got {t.held_floor}")
    _check(
        0 <= t.held_cooldown_s < math.inf,
        f"timing.held_cooldown_s must be >= 0 and finite, got {t.held_cooldown_s}",
    )
    names = cfg.providers.names
    _check(bool(names), "providers.names must name at least one provider")
    _check(len(set(names)) == len(names), f"providers.names has duplicates: {names}")
    for name in [*names, cfg.check.fallback]:
        try:
            providers.get(name)
        except providers.ProviderError as exc:
            key = "check.fallback" if name not in names else "providers.names"
            raise ConfigError(f"{key}: {exc}") from None
    _check(cfg.check.reference_max_gib >= 0, "check.reference_max_gib must be >= 0")
    _check(cfg.device >= 0, f"device must be >= 0, got {cfg.device}")
    _check(cfg.time_limit_s >= 0, f"time_limit_s must be >= 0 (0: none), got {cfg.time_limit_s}")
    _check(
        cfg.run_id is None or RUN_ID.fullmatch(cfg.run_id) is not None,
        f"run_id must be letters, digits, '.', '_' or '-', got {cfg.run_id!r}",
    )
    _check(  # a run without run_id is named after its sweep
        RUN_ID.fullmatch(cfg.sweep.name) is not None,
        f"sweep.name must be letters, digits, '.', '_' or '-', got {cfg.sweep.name!r}",
    )
    _check_scale_out(cfg)
    _check_tuning_cache(cfg)
    try:  # the run records them; a bad one must stop it here, not once the GPU is set up
        environment.git_override()
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    problems = expand_points(cfg.sweep)
    _check_reference_or_fallback(cfg, problems)
    return problems


def _check_reference_or_fallback(cfg: BenchConfig, problems: list[Problem]) -> None:
    """Every answer needs something to be checked against: the float64 reference where it fits
    check.reference_max_gib, else the check.fallback provider, which must then be measured too."""
    from harness import providers

    names, check = cfg.providers.names, cfg.check
    big = [p for p in problems if reference_gib(p) > check.reference_max_gib]
    fallback = providers.get(check.fallback)
    beyond = [(p, fallback.supports(p)) for p in big if fallback.supports(p)]
    if beyond:
        problem, reason = beyond[0]
        raise ConfigError(
            f"{len(beyond)} point(s), the first {problem.key()}, need a float64 reference above "
            f"check.reference_max_gib={check.reference_max_gib:g} GiB "
            f"({reference_gib(problem):.1f} GiB) and check.fallback={check.fallback} cannot run "
            f"them ({reason}), so their answers could not be checked: raise "
            "check.reference_max_gib if the device holds the reference, or leave those points out"
        )
    if check.fallback in names:
        return
    if big:
        raise ConfigError(
            f"{len(big)} point(s), the first {big[0].key()}, need a float64 reference above "
            f"check.reference_max_gib={check.reference_max_gib:g} GiB "
            f"({max(map(reference_gib, big)):.1f} GiB at most), and check.fallback="
            f"{check.fallback} is not in providers.names, so their answers could not be "
            "checked: raise check.reference_max_gib or add the fallback to providers.names"
        )


def check_device(cfg: BenchConfig, device_count: int) -> None:
    """`device` must be one of the GPUs this node shows (gpus > 1 picks them itself)."""
    _check(
        cfg.gpus > 1 or cfg.device < device_count,
        f"device={cfg.device}, but this node shows {device_count} GPU(s): "
        f"device must be below {device_count}",
    )


def _check_tuning_cache(cfg: BenchConfig) -> None:
    """A tuning run needs its cache path to be a file (or nothing yet), not a folder."""
    if cfg.tune == Tune.off or "cutile" not in cfg.providers.names:
        return
    from kernels.cutile.autotune import cache_path

    path = cache_path()
    _check(
        not path.exists() or path.is_file(),
        f"tune={cfg.tune.value}: the cuTile tuning cache {path} is not a file; point "
        "SSDBENCH_TUNING_CACHE at a JSON file path",
    )


def _check_scale_out(cfg: BenchConfig) -> None:
    """Shards and gpus: every shard of a sweep must land in one run, one process per GPU."""
    count, index = cfg.shard.count, cfg.shard.index
    _check(count >= 1, f"shard.count must be >= 1, got {count}")
    _check(0 <= index < count, f"shard.index must be in [0, shard.count={count}), got {index}")
    _check(
        count == 1 or cfg.run_id is not None,
        "shard.count > 1 needs an explicit run_id, so that every shard writes into the same run",
    )
    _check(cfg.gpus >= 1, f"gpus must be >= 1, got {cfg.gpus}")
    if cfg.gpus > 1:
        _check(count == 1, "gpus > 1 splits the sweep itself; leave shard.* at their defaults")
        _check(cfg.device == 0, "gpus > 1 gives each shard its own GPU; leave device at 0")
        _check(
            cfg.run_id is not None or not cfg.resume,
            "gpus > 1 with resume=true needs the run_id of the run to resume",
        )


def _unknown_keys(node: dict, schema: dict, prefix: str = "") -> list[str]:
    found = []
    for key, value in node.items():
        if key not in schema:
            found.append(f"{prefix}{key}")
        elif isinstance(schema[key], dict) and isinstance(value, dict):
            found += _unknown_keys(value, schema[key], f"{prefix}{key}.")
    return found


def to_bench(cfg: DictConfig) -> BenchConfig:
    """The composed config as a BenchConfig object (missing values and keys added with Hydra's
    `+key=value`, which bypasses the schema, are a ConfigError)."""
    schema = OmegaConf.to_container(OmegaConf.structured(BenchConfig))
    unknown = _unknown_keys(OmegaConf.to_container(cfg), schema)
    if unknown:
        raise ConfigError(f"unknown key(s) {unknown}; see harness/config.py for the keys")
    try:
        bench = OmegaConf.to_object(cfg)
    except Exception as exc:  # OmegaConf's MissingMandatoryValue and friends
        raise ConfigError(one_line(exc)) from None
    if not isinstance(bench, BenchConfig):
        raise ConfigError("the config was not composed from bench_schema (conf/config.yaml)")
    return bench


def one_line(exc: BaseException) -> str:
    """Hydra/OmegaConf errors span lines (message, cause, full_key); keep what names the key."""
    parts = []
    while exc is not None:
        for line in (line.strip() for line in str(exc).splitlines()):
            if line.startswith("Config search path"):
                break
            if line and not line.startswith(("object_type", "reference_type")):
                parts.append(line)
        exc = exc.__cause__
    return "; ".join(dict.fromkeys(parts))


def compose(overrides: Sequence[str] = (), with_hydra: bool = False) -> DictConfig:
    """The job config conf/config.yaml composes to with these overrides (with its hydra node, in
    which Hydra's own overrides land, when asked)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return hydra_compose(
            config_name="config", overrides=list(overrides), return_hydra_config=with_hydra
        )


def check_hydra_overrides(args: Sequence[str]) -> None:
    """ConfigError for a Hydra override (hydra/launcher=..., hydra.launcher.x=...) that does not
    compose: a launcher's name or key mistyped, which Hydra would report only as a traceback-like
    exit 1."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    lines = [a for a in args if a not in ("-m", "--multirun")]
    parsed = OverridesParser.create().parse_overrides(lines)  # job_overrides parsed them first
    own = [o.input_line for o in parsed if o.is_hydra_override() and not o.is_sweep_override()]
    if own:
        try:
            compose(own, with_hydra=True)
        except Exception as exc:
            raise ConfigError(one_line(exc)) from None


def job_overrides(args: Sequence[str]) -> list[list[str]]:
    """Override lists of the jobs a command line runs: one, or multirun's (-m) product of sweeps.

    Hydra's own overrides (hydra.*, hydra/...) are left out: they do not shape the job config.
    """
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import Glob

    multirun = any(a in ("-m", "--multirun") for a in args)
    lines = [a for a in args if a not in ("-m", "--multirun")]
    try:
        parsed = OverridesParser.create().parse_overrides(lines)
    except Exception as exc:
        raise ConfigError(one_line(exc)) from None
    choices = []
    for override in parsed:
        if override.is_hydra_override():
            continue
        if not override.is_sweep_override():
            choices.append([override.input_line])
            continue
        _check(multirun, f"{override.input_line}: sweeping over values needs multirun (-m)")
        _check(override.is_discrete_sweep(), f"{override.input_line}: only lists/ranges sweep")
        key = override.get_key_element()
        if isinstance(override.value(), Glob):  # glob(...) over a config group's options
            options = sorted(path.stem for path in (CONF_DIR / key).glob("*.yaml"))
            values = override.value().filter(options)
            _check(bool(values), f"{override.input_line}: matches none of {key}'s {options}")
        else:
            values = list(override.sweep_string_iterator())
        choices.append([f"{key}={value}" for value in values])
    return [list(job) for job in itertools.product(*choices)]


def uses_slurm(args: Sequence[str]) -> bool:
    """Whether a command line picks the SLURM launcher (conf/hydra/launcher/ssdbench_slurm)."""
    return any(a.startswith("hydra/launcher=") and "slurm" in a for a in args)


def preflight(args: Sequence[str]) -> list[BenchConfig]:
    """Compose and validate every job of `run_bench.py args`, returning their configs;
    ConfigError for the first bad one. Under the SLURM launcher every job needs a run_id: a job
    SLURM requeues resumes its run only by its id (without one it would start a new run)."""
    slurm = uses_slurm(args)
    jobs = job_overrides(args)
    check_hydra_overrides(args)
    benches = []
    for overrides in jobs:
        try:
            cfg = compose(overrides)
        except Exception as exc:  # Hydra's composition errors name the key
            raise ConfigError(one_line(exc)) from None
        bench = to_bench(cfg)
        validate(bench)
        _check(
            not slurm or bench.run_id is not None,
            "the SLURM launcher needs run_id=...: a requeued job resumes its run by that id",
        )
        benches.append(bench)
    return benches
