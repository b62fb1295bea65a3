"""kernels/cutile/resources.py: resources read from real cubins, compiled on the CPU.

The kernels compiled are the specialisations that run on the H200: a kernel name it launched,
and the exact launches of a forward built from meta tensors (kernels/cutile/signatures.py, checked
against names the H200 launched in test_signatures.py). The relations checked are the ones the
H200 measured: the compute_out configurations that lost 16-32 % (docs/performance.md, changes
13 and 14) spill, or need far more registers, where the defaults chosen do not.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from kernels.cutile.config import SSDConfig
from kernels.cutile.resources import (
    Resources,
    _info_records,
    disassemble,
    listing_digest,
    nvdisasm,
    read_cubin,
    register_file_ctas,
)


def test_a_file_that_is_not_a_cubin_is_refused() -> None:
    with pytest.raises(ValueError, match="not an ELF64 cubin"):
        read_cubin(b"#!/bin/sh\n")


def _compiled(symbol: str, occupancy: int):
    pytest.importorskip("cuda.tile")
    from kernels.cutile.config import with_occupancy
    from kernels.cutile.resources import compile_resources
    from kernels.cutile.signatures import from_symbol

    _, kernel, signature = from_symbol(symbol)
    return compile_resources(with_occupancy(kernel, occupancy), signature)


def _launch(shape: str, overrides: dict, kernel: str = "compute_out_kernel"):
    """(kernel, signature) of `kernel` as a forward at `shape` launches it under `overrides`
    over the shape's default config."""
    pytest.importorskip("cuda.tile")
    from harness.inputs import meta_inputs
    from kernels.cutile.signatures import forward_launches
    from scripts.variants import parse_shape, point_config

    problem = parse_shape(shape)
    launches = forward_launches(meta_inputs(problem).kwargs(), point_config(problem, overrides))
    ((_, compiled, signature),) = [launch for launch in launches if launch[0] == kernel]
    return compiled, signature


def _launched(shape: str, overrides: dict, kernel: str = "compute_out_kernel"):
    """Resources of `kernel` as `_launch` finds it."""
    from kernels.cutile.resources import compile_resources

    return compile_resources(*_launch(shape, overrides, kernel))


def _machine_code(shape: str, overrides: dict) -> str:
    """compute_out's machine code as `_launch` finds it (skips without nvdisasm)."""
    tool = nvdisasm()
    if tool is None:
        pytest.skip("no nvdisasm (on PATH or in the triton package)")
    from kernels.cutile.resources import compile_cubin

    return disassemble(compile_cubin(*_launch(shape, overrides)), tool)


@pytest.mark.slow
def test_a_kernel_name_the_gpu_launched_compiles_as_its_launch_does() -> None:
    """compute_out at 64K/128/128 as the H200 launched it (its mangled name, as a profiler shows
    it, read back by `from_symbol`) compiles to what the CPU builds for that launch under the
    configuration recorded beside it: three CTAs per SM fit (at most 80 registers a thread, no
    spills)."""
    pytest.importorskip("cuda.tile")
    from tests.kernels.recorded_symbols import SYMBOLS

    rows = [json.loads(line) for line in SYMBOLS.read_text().splitlines()]
    (row,) = [
        r for r in rows
        if r["point"].startswith("b1_L65536_H128_P64_N128") and r["variant"] == "base"
        and r["kernel"] == "compute_out_kernel"
    ]  # fmt: skip
    from_name = _compiled(row["symbol"], row["occupancy"])
    assert row["occupancy"] == 3 and from_name.local_bytes == 0 and from_name.registers <= 80
    recorded = SSDConfig.from_dict(row["config"]).to_dict()  # as records are read
    assert from_name == _launched("65536:128:128", recorded)


@pytest.mark.slow
def test_measured_losses_show_as_spills_or_registers() -> None:
    default_128 = _launched("65536:128:128", {})  # pairs, 3 CTAs/SM, 32-column k-tiles
    assert default_128.local_bytes == 0
    with_64_column_k_tiles = _launched("65536:128:128", {"out_block_k": 64})  # +16-32 %
    assert with_64_column_k_tiles.local_bytes > 0
    default_64 = _launched("65536:32:64", {})
    pairs_64 = _launched("65536:32:64", {"out_heads": 2})  # +17 %
    assert default_64.local_bytes == 0 and pairs_64.local_bytes > 0


@pytest.mark.slow
def test_the_diagonal_k_tile_loads_its_x_once() -> None:
    """With the row factor below the diagonal and square k-tiles (dstate 64's default), the
    diagonal tile is peeled out of compute_out's k-loop so that its x rows serve D·x too (over
    chunks of four blocks, or with segments or pairs of heads), a single head's rows requested
    before its C·Bᵀ tile (change 58): at 64K/128/64 over chunks of 256 the build takes 42.4 KB
    of shared memory, at the same 64 registers, against 52.4 KB over chunks of 128, where the
    rows are loaded twice."""
    peeled = _launched("65536:128:64:256", {})
    twice = _launched("65536:128:64:128", {})
    assert peeled.local_bytes == 0 and peeled.registers <= 64
    assert peeled.shared_bytes <= 44 * 1024 < twice.shared_bytes


@pytest.mark.slow
def test_hinted_decays_change_what_four_compute_out_ctas_compile_to_at_dstate_256() -> None:
    """At four CTAs per SM, compute_out with its k-tiles' decays hinted (−3 to −6 % against three
    CTAs) compiles to 64 registers and 54 KB of shared memory; unhinted (+10 to +13 %) to 96
    registers and 33 KB (change 29). The register file holds four CTAs of either: the hinted
    build is 256 threads of 64 registers, the unhinted one 128 threads of 95."""
    hinted = _launched("65536:32:256", {})
    unhinted = _launched("65536:32:256", {"out_hint_decays": 0})
    for kernel in (hinted, unhinted):
        assert kernel.local_bytes == 0 and 4 * kernel.shared_bytes <= 228 * 1024
        assert register_file_ctas(kernel) >= 4
    assert hinted.registers < unhinted.registers and hinted.shared_bytes > unhinted.shared_bytes


@pytest.mark.slow
def test_the_state_walk_does_not_spill_as_launched() -> None:
    walk = _launched("65536:128:128", {}, "fwd_pass_state_kernel")
    assert walk.local_bytes == 0 and 0 < walk.registers <= 255


def test_info_records_step_over_every_record_format() -> None:
    """A `.nv.info.<kernel>` section mixes four-byte records (no value, a byte, a half-word) with
    sized ones; stepping one byte short after a byte record lost every record after it."""
    reqntid = struct.pack("<III", 256, 1, 1)
    info = (
        bytes([2, 0x4C, 1, 0])  # a byte value and its padding
        + bytes([3, 0x1B, 0xFF, 0])  # a half-word value
        + bytes([1, 0x54, 0, 0])  # no value, two bytes of padding
        + bytes([4, 0x10]) + struct.pack("<H", 12) + reqntid
        + bytes([4, 0x36]) + struct.pack("<HI", 4, 8)
    )  # fmt: skip
    assert _info_records(info) == {0x10: reqntid, 0x36: struct.pack("<I", 8)}
    with pytest.raises(ValueError, match="record format 9"):
        _info_records(bytes([9, 0x10, 0, 0]))


def test_register_file_ctas_rounds_each_threads_registers_up_to_eight() -> None:
    assert register_file_ctas(Resources(255, 0, 0, 256)) == 1  # 256 × 256 = the whole file
    assert register_file_ctas(Resources(128, 0, 0, 256)) == 2
    assert register_file_ctas(Resources(64, 0, 0, 256)) == 4
    assert register_file_ctas(Resources(70, 0, 0, 128)) == 7  # 72 × 128 a CTA
    assert register_file_ctas(Resources(168, 0, 0, 384)) == 1
    assert register_file_ctas(Resources(64, 0, 0)) is None


@pytest.mark.slow
def test_the_32_head_walker_holds_the_register_file_and_two_per_sm_do_not() -> None:
    """Runs 218–219: nothing ran beside the default walk at 16K/32/256, a 256-thread CTA of 255
    registers; at the two-per-SM hint (128 registers) two CTAs fit, and the register file is
    what its threads and registers say."""
    walk = _launched("16384:32:256:128", {}, "fwd_pass_state_kernel")
    assert (walk.registers, walk.threads, register_file_ctas(walk)) == (255, 256, 1)
    halved = _launched("16384:32:256:128", {"state_occupancy": 2}, "fwd_pass_state_kernel")
    assert (halved.threads, register_file_ctas(halved)) == (256, 2)


def test_a_name_that_is_not_one_of_our_kernels_is_refused() -> None:
    pytest.importorskip("cuda.tile")
    from kernels.cutile.signatures import from_symbol

    with pytest.raises(ValueError, match="none of"):
        from_symbol("matmul_kernel_Kt2")


def test_listing_digest_ignores_addresses_and_names(tmp_path: Path) -> None:
    """Two listings that differ only in addresses, labels and the kernel's name hash alike; one
    changed instruction does not."""
    listing = {
        "a": ".text.k_I1:\n        /*0000*/  LDC R1, c[0x0][0x28] ;\n        /*0010*/  EXIT ;\n",
        "b": ".text.k_I2:\n.L_x_0:\n  /*0100*/  LDC R1, c[0x0][0x28] ;\n  /*0110*/  EXIT ;\n",
        "c": ".text.k_I1:\n        /*0000*/  LDC R2, c[0x0][0x28] ;\n        /*0010*/  EXIT ;\n",
    }
    digests = {}
    for name, text in listing.items():
        tool = tmp_path / f"disasm-{name}"
        tool.write_text(f"#!/bin/sh\ncat <<'END'\n{text}END\n")
        tool.chmod(0o755)
        digests[name] = listing_digest(disassemble(b"cubin", str(tool)))
    assert digests["a"] == digests["b"] and digests["a"][0] == 2
    assert digests["c"][1] != digests["a"][1]


@pytest.mark.slow
def test_the_hinted_decays_change_the_machine_code_and_a_repeat_does_not() -> None:
    shape = "65536:32:256:256"  # the row kernel, with chunk_cb

    def digest(overrides: dict) -> tuple[int, str]:
        return listing_digest(_machine_code(shape, overrides))

    assert digest({}) == digest({})
    assert digest({}) != digest({"out_hint_decays": 0})


@pytest.mark.slow
def test_the_carried_state_is_loaded_without_waiting_for_the_row_decays() -> None:
    """Change 68: compute_out's producer issues C's and the carried state's tiles at the CTA's
    start, before any wait. With the rows' decays on TMA too, it issued those and then waited
    for the workers to read them before the state's load, into the same shared-memory slot."""
    code = _machine_code("65536:128:64:128", {}).splitlines()  # one head a CTA, unsegmented
    first_load = next(i for i, line in enumerate(code) if "UTMALDG" in line)
    first_wait = next(i for i in range(first_load, len(code)) if "SYNCS.PHASECHK" in code[i])
    assert sum("UTMALDG" in line for line in code[first_load:first_wait]) == 2
