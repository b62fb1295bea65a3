"""Registers, local memory and shared memory of a compiled cuTile kernel, read on the CPU.

An occupancy hint the tiles cannot meet is not reported by tileiras: the kernel spills to local
memory, or takes more registers than the hint allows and loses CTAs per SM, and runs slower. On the
H200 every launch configuration that measured a large loss in compute_out did one or the other where
its alternative did not (docs/performance.md), so reading the cubin's resource attributes tells,
without a GPU, which configurations are worth timing. Compile the specialisation that runs
(kernels/cutile/signatures.py: `forward_launches` on meta tensors, or `from_symbol` on a recorded
or profiled kernel name): a signature without the facts a launch derives from its tensors compiles
other code. The numbers come from the cubin's `.nv.info` section
(attributes EIATTR_REGCOUNT and EIATTR_FRAME_SIZE), its `.nv.info.<kernel>` section (EIATTR_REQNTID,
the threads a CTA is built for) and the size of its `.nv.shared.<kernel>` section. Registers times
threads is what a CTA takes of the SM's 64K-register file: a 255-register walker of 256 threads
holds all of it, so nothing else runs on its SM (runs 218–219).

`listing_digest` of `disassemble`'s listing tells whether two configurations compiled to the
same machine code: a knob that leaves it unchanged (a latency hint on a load the compiler
already pipelines, say) needs no device time.
"""

from __future__ import annotations

import hashlib
import io
import re
import shutil
import struct
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

ELF_MAGIC = b"\x7fELF"
SM_REGISTERS = 65536  # the register file of an SM (sm_90, sm_100)
REGISTER_GRANULE = 8  # a thread's registers are allocated in multiples of this
EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL, EIFMT_SVAL = 1, 2, 3, 4
EIATTR_REQNTID = 0x10
EIATTR_FRAME_SIZE = 0x11
EIATTR_REGCOUNT = 0x2F


@dataclass(frozen=True)
class Resources:
    registers: int  # per thread
    local_bytes: int  # per thread: the stack frame, i.e. spilled registers and local arrays
    shared_bytes: int  # static shared memory per CTA
    threads: int = 0  # per CTA, as built (EIATTR_REQNTID; 0 where the cubin does not say)


def read_cubin(data: bytes) -> Resources:
    """The resources of the one kernel in an ELF64 cubin (as `export_kernel` writes it)."""
    if data[:4] != ELF_MAGIC or data[4] != 2:
        raise ValueError("not an ELF64 cubin (export the kernel with output_format='cubin')")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = [struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize) for i in range(shnum)]
    names_at = headers[shstrndx][4]

    def name(offset: int) -> str:
        start = names_at + offset
        return data[start : data.index(b"\0", start)].decode()

    attributes: dict[int, bytes] = {}
    shared = 0
    for name_offset, _, _, _, offset, size in headers:
        section = name(name_offset)
        if section.startswith(".nv.shared.") and not section.startswith(".nv.shared.reserved"):
            shared += size
        elif section.startswith(".nv.info"):  # .nv.info: per-function values; .nv.info.<kernel>
            attributes.update(_info_records(data[offset : offset + size]))
    if EIATTR_REGCOUNT not in attributes:
        raise ValueError("the cubin has no register count (EIATTR_REGCOUNT)")
    threads = 0
    if len(attributes.get(EIATTR_REQNTID, b"")) == 12:
        x, y, z = struct.unpack("<III", attributes[EIATTR_REQNTID])
        threads = x * y * z
    return Resources(
        _function_value(attributes[EIATTR_REGCOUNT]),
        _function_value(attributes.get(EIATTR_FRAME_SIZE, bytes(8))),
        shared,
        threads,
    )


def register_file_ctas(resources: Resources) -> int | None:
    """CTAs of this build that an SM's register file holds at once (None where the threads are
    not known): the bound on CTAs per SM that registers set, whatever the shared memory."""
    if not resources.threads:
        return None
    granules = -(-resources.registers // REGISTER_GRANULE)
    return SM_REGISTERS // (granules * REGISTER_GRANULE * resources.threads)


def _info_records(info: bytes) -> dict[int, bytes]:
    """{attribute: payload} of the sized records of one `.nv.info` section (the last of each
    attribute); the other records are four bytes each: format, attribute, two bytes of value or
    padding."""
    records, pos = {}, 0
    while pos + 4 <= len(info):
        fmt, attribute = info[pos], info[pos + 1]
        if fmt == EIFMT_SVAL:
            (size,) = struct.unpack_from("<H", info, pos + 2)
            records[attribute] = info[pos + 4 : pos + 4 + size]
            pos += 4 + size
        elif fmt in (EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL):
            pos += 4
        else:
            raise ValueError(f"unknown .nv.info record format {fmt}")
    return records


def _function_value(payload: bytes) -> int:
    """The value of a per-function record: a symbol index, then a u32."""
    if len(payload) != 8:
        raise ValueError(f"a per-function .nv.info record has 8 bytes, not {len(payload)}")
    return struct.unpack_from("<I", payload, 4)[0]


def compile_cubin(kernel, signature, arch: str = "sm_90") -> bytes:
    """Compile one specialisation for `arch` on this machine."""
    from cuda.tile.compilation import export_kernel

    cubin = io.BytesIO()
    export_kernel(kernel, [signature], cubin, gpu_code=arch, output_format="cubin")
    return cubin.getvalue()


def compile_resources(kernel, signature, arch: str = "sm_90") -> Resources:
    """Compile one specialisation for `arch` on this machine and read its resources."""
    return read_cubin(compile_cubin(kernel, signature, arch))


def nvdisasm() -> str | None:
    """An nvdisasm: on PATH, else the one Triton's wheel carries; None without either."""
    found = shutil.which("nvdisasm")
    if found:
        return found
    try:
        import triton
    except ImportError:
        return None
    bundled = Path(triton.__file__).parent / "backends/nvidia/bin/nvdisasm"
    return str(bundled) if bundled.is_file() else None


_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s*(.*?)\s*$")


def disassemble(cubin: bytes, tool: str) -> str:
    """A cubin's machine code as `tool` (nvdisasm) prints it, addresses included: what to read
    when two builds differ, e.g. which barrier a load waits on before it is issued."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run(
            [tool, "-c", f.name], capture_output=True, text=True, check=True
        ).stdout


def listing_digest(listing: str) -> tuple[int, str]:
    """(instructions, a 12-digit hash of them) of a listing `disassemble` returned. Addresses,
    labels and the kernel's name are left out, so two configurations that differ only in a
    constant the code never reads compare equal."""
    lines = [m.group(1) for m in map(_INSTRUCTION.match, listing.splitlines()) if m]
    return len(lines), hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]
