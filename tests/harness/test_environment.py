"""harness.environment on a machine without GPU tools: every probe tolerates absence."""

from __future__ import annotations

import json

import pytest

from harness import environment


def test_capture_without_gpu_or_tools(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(environment, "_run", lambda cmd, timeout=20.0: None)
    monkeypatch.setattr(environment, "tileiras_version", lambda: None)
    with pytest.warns(UserWarning, match="no git commit"):
        env = environment.capture(None)
    assert env["gpu"] == {"name": "cpu", "index": None}
    assert env["git"] == {"commit": None, "dirty": None}
    assert env["versions"]["tileiras"] is None and env["clocks_start"] is None
    assert env["versions"]["torch"]  # installed here
    json.dumps(env)  # goes into meta.json


COMMIT = "0123456789abcdef0123456789abcdef01234567"
OTHER = "feedbeeffeedbeeffeedbeeffeedbeeffeedbeef"


def _git(monkeypatch: pytest.MonkeyPatch, commit: str | None, status: str | None) -> list:
    """A fake `git` answering rev-parse and status; returns the commands it was asked."""
    asked = []

    def run(cmd, timeout=20.0):
        asked.append(cmd)
        return commit if "rev-parse" in cmd else status

    monkeypatch.setattr(environment, "_run", run)
    return asked


def test_git_state_reads_commit_and_dirty_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    asked = _git(monkeypatch, COMMIT, "M harness/runner.py\n M kernels/cutile/ssd.py")
    assert environment.git_state() == {
        "commit": COMMIT,
        "dirty": True,
        "changed": ["harness/runner.py", "kernels/cutile/ssd.py"],
    }
    status = next(cmd for cmd in asked if "status" in cmd)
    assert status[:3] == ["git", "-c", "safe.directory=*"]  # a checkout another user owns
    assert status[-2:] == [".", ":(exclude)results"]  # results moved aside are not code


def test_git_state_from_the_environment_without_git(monkeypatch: pytest.MonkeyPatch) -> None:
    _git(monkeypatch, None, None)
    monkeypatch.setenv("SSDBENCH_GIT_COMMIT", OTHER)
    monkeypatch.setenv("SSDBENCH_GIT_DIRTY", "0")
    state = environment.git_state()
    assert state == {"commit": OTHER, "dirty": False, "source": "SSDBENCH_GIT_COMMIT"}


def test_commit_set_by_the_copier_wins_over_a_stale_git(monkeypatch: pytest.MonkeyPatch) -> None:
    _git(monkeypatch, COMMIT, "M kernels/cutile/ssd.py")
    monkeypatch.setenv("SSDBENCH_GIT_COMMIT", OTHER)
    monkeypatch.setenv("SSDBENCH_GIT_DIRTY", "0")
    assert environment.git_state() == {
        "commit": OTHER,
        "dirty": False,
        "source": "SSDBENCH_GIT_COMMIT",
        "local_git": {"commit": COMMIT, "dirty": True, "changed": ["kernels/cutile/ssd.py"]},
    }


@pytest.mark.parametrize("status", ["", "M kernels/cutile/ssd.py"])
def test_at_the_copiers_commit_the_trees_own_answer_is_the_dirty_flag(
    monkeypatch: pytest.MonkeyPatch, status: str
) -> None:
    _git(monkeypatch, COMMIT, status)
    monkeypatch.setenv("SSDBENCH_GIT_COMMIT", COMMIT)
    monkeypatch.setenv("SSDBENCH_GIT_DIRTY", "1" if not status else "0")
    assert environment.git_state()["dirty"] is bool(status)


@pytest.mark.parametrize(
    ("commit", "dirty", "named"),
    [
        ("HEAD", "0", "SSDBENCH_GIT_COMMIT must be a full commit"),
        ("6350b9b", "0", "SSDBENCH_GIT_COMMIT must be a full commit"),
        (COMMIT, "true", "SSDBENCH_GIT_DIRTY must be 0 or 1"),
    ],
)
def test_a_malformed_override_is_refused(monkeypatch, commit: str, dirty: str, named: str) -> None:
    _git(monkeypatch, None, None)
    monkeypatch.setenv("SSDBENCH_GIT_COMMIT", commit)
    monkeypatch.setenv("SSDBENCH_GIT_DIRTY", dirty)
    with pytest.raises(ValueError, match=named):
        environment.git_state()


def test_an_empty_dirty_flag_is_unknown_and_a_sha256_commit_is_full(monkeypatch) -> None:
    _git(monkeypatch, None, None)
    monkeypatch.setenv("SSDBENCH_GIT_COMMIT", "ab" * 32)
    monkeypatch.setenv("SSDBENCH_GIT_DIRTY", "")
    assert environment.git_state()["dirty"] is None


def test_file_modes_are_not_code(monkeypatch: pytest.MonkeyPatch) -> None:
    """A copy that lost its exec bits is the commit's code all the same."""
    asked = _git(monkeypatch, COMMIT, "")
    environment.git_state()
    assert all("core.fileMode=false" in cmd for cmd in asked)


def test_no_commit_at_all_is_warned_about(monkeypatch: pytest.MonkeyPatch) -> None:
    _git(monkeypatch, None, None)
    monkeypatch.delenv("SSDBENCH_GIT_COMMIT", raising=False)
    with pytest.warns(UserWarning, match="set SSDBENCH_GIT_COMMIT"):
        assert environment.git_state() == {"commit": None, "dirty": None}


def test_missing_command_is_none() -> None:
    assert environment._run(["ssdbench-no-such-command-xyz"]) is None


def test_gpu_slug() -> None:
    assert environment.gpu_slug("NVIDIA H200") == "nvidia-h200"
    assert environment.gpu_slug("NVIDIA GeForce RTX 4090") == "nvidia-geforce-rtx-4090"
    assert environment.gpu_slug("???") == "unknown"


def test_clocks_read_every_queried_field_or_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    """nvidia-smi answers one CSV line per GPU; a line short of a field is not half-trusted."""
    monkeypatch.setattr(environment, "_smi_selector", lambda index: "00000000:19:00.0")
    line = "1980, 3201, 1980, 3201, 41, 612.35, 0x0000000000000004"
    queried = []

    def smi(cmd, timeout=20.0):
        queried.append(cmd)
        return line

    monkeypatch.setattr(environment, "_run", smi)
    state = environment.clocks(0)
    assert state == {
        "clocks.sm": "1980", "clocks.mem": "3201", "clocks.max.sm": "1980",
        "clocks.max.mem": "3201", "temperature.gpu": "41", "power.draw": "612.35",
        "clocks_throttle_reasons.active": "0x0000000000000004",
    }  # fmt: skip
    assert queried[0][:3] == ["nvidia-smi", "-i", "00000000:19:00.0"]
    line = "1980, 3201, 1980, 3201, 41, 612.35"
    assert environment.clocks(0) is None
    assert environment.clocks(None) is None


def _reading(sm: str, reasons: str, top: str = "1980") -> dict[str, str]:
    return {"clocks.sm": sm, "clocks.max.sm": top, "clocks_throttle_reasons.active": reasons}


def test_a_held_clock_is_a_limiting_reason_and_a_clock_below_the_floor() -> None:
    held = environment.held_clock
    assert held(_reading("1785", "0x0000000000000004"), 0.95) == "1785 of 1980 MHz, reasons 0x4"
    assert held(_reading("1920", "0x0000000000000004"), 0.95) is None  # capped, 97 % of max
    assert held(_reading("1785", "0x0000000000000004"), 0.90) is None
    assert held(_reading("345", "0x0000000000000001"), 0.95) is None  # idle only
    assert held(_reading("1500", "0x0000000000000002"), 0.95) is None  # clocks someone set
    assert held(_reading("1700", "0x0000000000000022"), 0.95) == "1700 of 1980 MHz, reasons 0x22"
    assert held(_reading("1785", "0x0000000000000000"), 0.95) is None
    assert held(_reading("1785", "[N/A]"), 0.95) is None
    assert held({"clocks.sm": "1785"}, 0.95) is None
    assert held(None, 0.95) is None
