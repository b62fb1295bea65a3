"""Copy one commit's kernels/ into DIR/kernels_NAME with its imports renamed, so that
`scripts/compare_configs.py --tree NAME=DIR` runs those kernels in the same process as this tree's.

Kernel changes that are not launch-configuration fields (a different exponential, a different
launch mode) can then be timed against the kernels before them on the same GPU, interleaved, in
one process, instead of across processes or nodes:

    python scripts/kernel_tree.py a77b8ff old .scratch/trees
    python scripts/compare_configs.py --shapes 65536:128:128 --variant base={} \
        --tree old=.scratch/trees
"""

from __future__ import annotations

import argparse
import io
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

IMPORT = re.compile(r"^(\s*)(from|import) kernels(?=[.\s])", re.MULTILINE)


def rename_imports(source: str, package: str) -> str:
    """The source with its absolute imports of `kernels` pointed at `package`."""
    return IMPORT.sub(rf"\1\2 {package}", source)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("commit", help="any git revision")
    parser.add_argument("name", help="the copy becomes the package kernels_NAME")
    parser.add_argument(
        "dir", type=Path, help="where the package goes (an ignored folder such as .scratch/trees)"
    )
    args = parser.parse_args()
    if not args.name.isidentifier():
        parser.error(f"name {args.name!r} must be a Python identifier")
    archive = subprocess.run(
        ["git", "archive", args.commit, "kernels"], capture_output=True, check=False
    )
    if archive.returncode:
        parser.error(f"git archive {args.commit}: {archive.stderr.decode().strip()}")
    target = args.dir / f"kernels_{args.name}"
    shutil.rmtree(target, ignore_errors=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            path = target / Path(member.name).relative_to("kernels")
            path.parent.mkdir(parents=True, exist_ok=True)
            data = tar.extractfile(member).read()
            if path.suffix == ".py":
                data = rename_imports(data.decode(), f"kernels_{args.name}").encode()
            path.write_bytes(data)
    print(f"{args.commit} kernels -> {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
