"""scripts/kernel_tree.py: a commit's kernels copied under another package name still import."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from scripts.kernel_tree import rename_imports

ROOT = Path(__file__).resolve().parents[2]


def test_only_imports_of_the_kernels_package_are_renamed() -> None:
    source = (
        "from kernels.cutile.config import SSDConfig\n"
        "    from kernels.cutile.chunk_cb import chunk_cb\n"
        "import kernels.reference\n"
        "import kernelsx\n"
        "# from kernels.cutile import nothing, in a comment after code\n"
        "text = 'from kernels.cutile'\n"
    )
    assert rename_imports(source, "kernels_old") == (
        "from kernels_old.cutile.config import SSDConfig\n"
        "    from kernels_old.cutile.chunk_cb import chunk_cb\n"
        "import kernels_old.reference\n"
        "import kernelsx\n"
        "# from kernels.cutile import nothing, in a comment after code\n"
        "text = 'from kernels.cutile'\n"
    )


def test_a_copy_of_head_imports_as_its_own_package(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "scripts/kernel_tree.py", "HEAD", "head", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    if done.returncode and "not a git repository" in done.stderr:
        pytest.skip("no git history here")
    assert done.returncode == 0, done.stderr
    check = (
        "import sys; sys.path.insert(0, sys.argv[1]); import kernels_head.cutile.config as c; "
        "assert c.__file__.startswith(sys.argv[1]); print(c.default_config(128).out_heads)"
    )
    imported = subprocess.run(
        [sys.executable, "-c", check, str(tmp_path)], capture_output=True, text=True, timeout=60
    )
    assert imported.returncode == 0 and imported.stdout.strip() == "2", imported.stderr
    copied = (tmp_path / "kernels_head" / "cutile" / "ssd.py").read_text()
    assert "from kernels." not in copied and "from kernels_head.cutile" in copied


def test_a_tree_that_is_not_there_is_refused() -> None:
    done = subprocess.run(
        [sys.executable, "scripts/compare_configs.py", "--shapes", "1024:32:64",
         "--tree", "old=/nonexistent"],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and "DIR/kernels_NAME" in done.stderr, done.stderr
