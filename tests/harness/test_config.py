"""harness.config: every conf group composes, typos and bad values fail naming the key, sweeps
expand to validated points, and multirun command lines are checked job by job."""

from __future__ import annotations

from dataclasses import fields

import pytest

from harness import config
from harness.config import ConfigError, Mode, SweepConfig
from harness.problem import Problem

GROUPS = {
    "sweep": {"default": 63, "paper": 15, "models": 18, "smoke": 4},
    "timing": ("default", "quick", "thorough"),
    "providers": ("all", "triton", "cutile", "with_reference"),
}


def bench(*overrides: str) -> config.BenchConfig:
    return config.to_bench(config.compose(overrides))


@pytest.mark.parametrize("name,points", GROUPS["sweep"].items())
def test_every_sweep_composes_to_valid_points(name: str, points: int) -> None:
    cfg = bench(f"sweep={name}")
    assert cfg.sweep.name == name
    assert len(config.validate(cfg)) == points


@pytest.mark.parametrize("group", ["timing", "providers"])
def test_every_timing_and_providers_option_composes(group: str) -> None:
    for option in GROUPS[group]:
        config.validate(bench(f"{group}={option}"))


def test_defaults() -> None:
    cfg = bench()
    assert cfg.providers.names == ["cutile", "triton"]
    assert cfg.timing.modes == [Mode.eager, Mode.graph, Mode.kernels]
    assert (cfg.timing.l2.value, cfg.timing.ci_target) == ("cold", 0.01)
    assert (cfg.tune.value, cfg.triton_autotune.value, cfg.run_id) == ("off", "once", None)
    first, *_, last = config.validate(cfg)
    assert first == Problem(seqlen=1024, dstate=64, nheads=32)
    assert last == Problem(seqlen=65536, dstate=256, nheads=128)


def test_models_points_replace_sweep_fields() -> None:
    points = config.validate(bench("sweep=models"))
    assert {(p.nheads, p.ngroups) for p in points} == {
        (24, 1), (32, 1), (48, 1), (64, 1), (80, 1), (128, 8)
    }  # fmt: skip
    assert {p.seqlen for p in points} == {2048, 4096, 8192}
    assert {(p.headdim, p.dstate, p.chunk_size) for p in points} == {(64, 128, 256)}


def test_sweep_fields_are_the_problem_fields() -> None:
    own = {"name", "points"}
    assert {f.name for f in fields(SweepConfig)} - own == {f.name for f in fields(Problem)}


@pytest.mark.parametrize(
    "override,named",
    [
        ("sweep.seqlenn=1024", "seqlenn"),
        ("timing.ci_targt=0.1", "ci_targt"),
        ("+sweep.has_zz=true", "sweep.has_zz"),
        ("+extra=1", "extra"),
        ("sweep=smok", "sweep/smok"),
    ],
)
def test_typo_fails_naming_the_key(override: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named):
        config.preflight([override])


@pytest.mark.parametrize(
    "override,named",
    [
        ("sweep.seqlen=-1", "seqlen must be >= 1, got -1"),
        ("sweep.seqlen=[1024,-5]", "seqlen must be >= 1, got -5"),
        ("sweep.dtype=float8", "dtype must be one of"),
        ("sweep.chunk_size=100", "chunk_size must be a power of two"),
        ("sweep.seqlen=[]", "sweep.seqlen is an empty list"),
        ("tune=always", "full_key: tune"),
        ("triton_autotune=sometimes", "full_key: triton_autotune"),
        ("timing.l2=lukewarm", "full_key: timing.l2"),
        ("timing.modes=[eager,wall]", r"full_key: timing.modes\[1\]"),
        ("timing.min_reps=many", "full_key: timing.min_reps"),
        ("timing.min_reps=5", "timing.min_reps must be >= 6, got 5: fewer samples have no 95 %"),
        ("timing.ci_target=2", "timing.ci_target must be in"),
        ("timing.max_reps=3", "timing.max_reps must be >= min_reps"),
        ("timing.modes=[graph,graph]", "timing.modes has duplicates"),
        ("timing.held_retimes=-1", "timing.held_retimes must be >= 0, got -1"),
        ("timing.held_floor=95", r"timing.held_floor must be in \(0, 1\], got 95"),
        ("timing.held_cooldown_s=-5", "timing.held_cooldown_s must be >= 0"),
        ("timing.held_cooldown_s=inf", "timing.held_cooldown_s must be >= 0 and finite"),
        ("sweep.name=h200/small", "sweep.name must be letters"),
        ("providers.names=[cutile,trition]", "providers.names: unknown provider 'trition'"),
        ("providers.names=[]", "providers.names must name"),
        ("check.fallback=nope", "check.fallback: unknown provider"),
        ("run_id=../escape", "run_id must be"),
        ("time_limit_s=-1", "time_limit_s must be >= 0"),
    ],
)
def test_bad_value_fails_naming_the_field(override: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named) as err:
        config.preflight([override])
    assert "\n" not in str(err.value)


def test_unknown_field_in_points_is_named() -> None:
    cfg = bench("sweep=models")
    cfg.sweep.points = [{"nheads": 24}, {"nhead": 32}]
    with pytest.raises(ConfigError, match=r"sweep.points\[1\]: unknown field\(s\) \['nhead'\]"):
        config.validate(cfg)


def test_scalars_lists_and_dt_limit_pairs_expand() -> None:
    cfg = bench("sweep=smoke", "sweep.seqlen=2048", "sweep.dtype=[bfloat16,float16]")
    points = config.validate(cfg)
    assert [(p.dtype, p.nheads, p.seqlen) for p in points] == [
        ("bfloat16", 32, 2048), ("bfloat16", 64, 2048), ("float16", 32, 2048), ("float16", 64, 2048)
    ]  # fmt: skip
    one = bench("sweep=smoke", "sweep.dt_limit=[0.0,0.1]")
    assert {p.dt_limit for p in config.validate(one)} == {(0.0, 0.1)}
    two = bench("sweep=smoke", "sweep.dt_limit=[[0.0,0.1],[0.0,1.0]]")
    assert {p.dt_limit for p in config.validate(two)} == {(0.0, 0.1), (0.0, 1.0)}


def test_planned_points_are_the_keys_of_the_sweep_in_a_runs_meta() -> None:
    sweep = {"name": "cut", "seqlen": [1024, 2048], "nheads": 32}
    keys = [Problem(seqlen=n, nheads=32).key() for n in (1024, 2048)]
    assert config.planned_points({"config": {"sweep": sweep}}) == keys
    for meta in (
        {},
        {"config": {"sweep": {**sweep, "bogus": 1}}},
        {"config": {"sweep": {**sweep, "nheads": -1}}},
    ):
        assert config.planned_points(meta) is None


def test_duplicate_points_are_measured_once() -> None:
    assert len(config.validate(bench("sweep=smoke", "sweep.seqlen=[1024,1024]"))) == 2


def test_multirun_jobs_are_the_product_of_sweeps() -> None:
    jobs = config.job_overrides(["-m", "sweep.seqlen=1024,4096", "timing=quick", "hydra.verbose=1"])
    assert jobs == [["sweep.seqlen=1024", "timing=quick"], ["sweep.seqlen=4096", "timing=quick"]]
    args = ["-m", "sweep=smoke", "sweep.seqlen=1024,4096", "sweep.dstate=64"]
    assert len(config.job_overrides(args)) == 2
    config.preflight(args)  # both jobs compose and validate


def test_the_slurm_launcher_needs_a_run_id() -> None:
    """A job SLURM requeues after its time limit resumes its run only by id."""
    slurm = ["-m", "hydra/launcher=ssdbench_slurm", "sweep=smoke"]
    with pytest.raises(ConfigError, match="SLURM launcher needs run_id"):
        config.preflight(slurm)
    config.preflight([*slurm, "run_id=big"])


def test_the_device_must_be_one_this_node_shows() -> None:
    config.check_device(bench("device=1"), 2)
    with pytest.raises(ConfigError, match="device=3, but this node shows 2 GPU"):
        config.check_device(bench("device=3"), 2)
    config.check_device(bench("device=3", "gpus=2"), 2)  # the launcher assigns the devices


def test_multirun_globs_a_groups_options_as_hydra_does() -> None:
    assert config.job_overrides(["-m", "sweep=glob(*o*)", "timing=quick"]) == [
        ["sweep=models", "timing=quick"],
        ["sweep=smoke", "timing=quick"],
    ]
    with pytest.raises(ConfigError, match=r"sweep=glob\(zz\*\): matches none of sweep's"):
        config.job_overrides(["-m", "sweep=glob(zz*)"])


def test_multirun_checks_every_job_before_any_runs() -> None:
    with pytest.raises(ConfigError, match="seqlen must be >= 1"):
        config.preflight(["-m", "sweep.seqlen=1024,-1"])


def test_sweeping_values_needs_multirun() -> None:
    with pytest.raises(ConfigError, match="needs multirun"):
        config.job_overrides(["sweep.seqlen=1024,4096"])


def test_unparsable_override_is_one_line() -> None:
    with pytest.raises(ConfigError) as err:
        config.job_overrides(["sweep.seqlen=[1024"])
    assert "\n" not in str(err.value)


def test_a_tuning_cache_that_is_a_folder_fails_before_any_gpu_work(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("SSDBENCH_TUNING_CACHE", str(tmp_path))
    with pytest.raises(ConfigError, match="tune=cached: the cuTile tuning cache .* not a file"):
        config.validate(bench("sweep=smoke", "tune=cached"))
    config.validate(bench("sweep=smoke", "tune=off"))  # never read
    monkeypatch.setenv("SSDBENCH_TUNING_CACHE", str(tmp_path / "tuning.json"))
    config.validate(bench("sweep=smoke", "tune=cached"))


def test_an_allocator_setting_that_defeats_the_poison_fails_before_any_gpu_work(
    monkeypatch,
) -> None:
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
    with pytest.raises(ConfigError, match="the allocator setting expandable_segments in"):
        config.validate(bench("sweep=smoke"))


def test_points_neither_the_reference_nor_the_fallback_can_check_fail_first() -> None:
    """Past the reference's memory budget the fallback (Triton) checks the answers, but not
    where its int32 offsets wrap: such a point is refused before any GPU work."""
    big = ["sweep=smoke", "sweep.batch=8", "sweep.seqlen=65536", "sweep.nheads=128"]
    with pytest.raises(ConfigError, match="check.fallback=triton cannot run them .*int32"):
        config.validate(bench(*big))
    config.validate(bench(*big, "check.reference_max_gib=1000"))


def test_a_malformed_git_override_is_a_config_error(monkeypatch) -> None:
    """Not a traceback once the GPU is set up: the run would record it."""
    monkeypatch.setenv("SSDBENCH_GIT_COMMIT", "fed7e0d87c6d")
    with pytest.raises(ConfigError, match="SSDBENCH_GIT_COMMIT must be a full commit"):
        config.validate(bench("sweep=smoke"))
