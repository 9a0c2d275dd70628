"""The memory model of lesson 04: counts that can be checked by hand, and the two pipelines' makespans."""
from __future__ import annotations

import itertools

import pytest

from course.models import memory_model as mm


# ------------------------------------------------------------------------------------------------
# Global memory
# ------------------------------------------------------------------------------------------------

def test_32_consecutive_floats_are_4_sectors_all_used():
    cost = mm.warp_row_access(64).coalescing()
    assert (cost.instructions, cost.requests, cost.sectors) == (1, 1, 4)
    assert cost.sector_ids == (0, 1, 2, 3)
    assert (cost.bytes_requested, cost.bytes_moved, cost.efficiency) == (128, 128, 1.0)
    assert mm.coalescing(range(0, 128, 4), 4) == cost


def test_32_consecutive_float4_are_16_sectors_in_one_instruction():
    cost = mm.warp_row_access(128, vector=4).coalescing()
    assert (cost.instructions, cost.sectors, cost.bytes_requested, cost.efficiency) == (1, 16, 512, 1.0)
    # The same 512 bytes as floats: four instructions of 4 sectors each.
    scalar = mm.total_coalescing(mm.coalescing(range(i * 128, i * 128 + 128, 4)) for i in range(4))
    assert (scalar.instructions, scalar.sectors, scalar.bytes_moved) == (4, 16, 512)
    assert mm.warp_instructions(128, 1) == 4 and mm.warp_instructions(128, 4) == 1


@pytest.mark.parametrize("row_floats", [8, 9, 64, 128])
def test_a_column_walk_of_a_row_major_matrix_is_32_sectors_for_128_bytes(row_floats):
    cost = mm.warp_column_walk(row_floats=row_floats, column=row_floats - 1).coalescing()
    assert (cost.sectors, cost.bytes_requested, cost.bytes_moved) == (32, 128, 1024)
    assert cost.efficiency == pytest.approx(0.125)


def test_a_row_starting_4_bytes_late_touches_a_fifth_sector():
    cost = mm.warp_row_access(64, offset_bytes=4).coalescing()
    assert cost.sectors == 5 and cost.sector_ids == (0, 1, 2, 3, 4)
    assert cost.efficiency == pytest.approx(128 / 160)


def test_lanes_asking_for_the_same_bytes_share_them():
    cost = mm.coalescing([64] * 32, 4)
    assert (cost.sectors, cost.bytes_requested, cost.efficiency) == (1, 4, 4 / 32)
    assert mm.sectors_touched([0, 4, 36, 1000], 4) == (0, 1, 31)


def test_byte_ranges_that_straddle_a_sector_count_both_sectors():
    """Four floats a lane, starting 8 bytes late: every lane's bytes end in the next sector. A float4 load there
    is refused (misaligned); the bytes still lie in 17 sectors, which is what narrower loads fetch."""
    starts = [8 + 16 * lane for lane in range(32)]
    assert len(mm.sectors_of_bytes(starts, 16)) == 17
    assert len({a // 32 for a in starts}) == 16  # counting start sectors only misses the last one
    aligned = [16 * lane for lane in range(32)]
    assert mm.sectors_of_bytes(aligned, 16) == mm.sectors_touched(aligned, 16)
    assert mm.sectors_of_bytes([30], 4) == (0, 1) and mm.sectors_of_bytes([0, 0], 33) == (0, 1)
    with pytest.raises(ValueError, match="no smaller than 1"):
        mm.sectors_of_bytes([0], 0)
    with pytest.raises(ValueError, match="no smaller than 0"):
        mm.sectors_of_bytes([-4], 4)


def test_a_misaligned_float4_is_refused_as_the_gpu_refuses_it():
    access = mm.warp_row_access(64, vector=4, offset_bytes=4)
    assert not access.aligned
    with pytest.raises(ValueError, match="misaligned"):
        access.coalescing()
    with pytest.raises(ValueError, match="misaligned"):
        mm.bank_conflict_ways(access.byte_addresses, 16)


# ------------------------------------------------------------------------------------------------
# Shared memory
# ------------------------------------------------------------------------------------------------

def test_a_column_walk_down_rows_of_64_floats_is_a_32_way_conflict():
    assert mm.warp_column_walk(row_floats=64, pad_floats=0, column=5).banks().ways == 32
    assert mm.warp_column_walk(row_floats=64, pad_floats=0).banks().wavefronts == 32


@pytest.mark.parametrize("column", [0, 7, 63])
def test_one_float_of_padding_spreads_the_column_over_all_32_banks(column):
    banks = mm.warp_column_walk(row_floats=64, pad_floats=1, column=column).banks()
    assert banks.ways == 1 and banks.conflict_free
    assert sorted(b for (b,) in banks.lane_banks) == list(range(32))


@pytest.mark.parametrize("pad, ways", [(0, 32), (1, 1), (2, 2), (3, 1), (4, 4), (8, 8), (16, 16), (32, 32)])
def test_padding_by_p_floats_leaves_gcd_p_32_ways(pad, ways):
    assert mm.bank_conflict_ways(mm.warp_column_walk(row_floats=64, pad_floats=pad).byte_addresses) == ways


def test_all_lanes_reading_one_word_is_a_broadcast():
    assert mm.bank_conflict_ways([128] * 32) == 1
    # Two words in one bank, each read by 16 lanes: 2 ways, not 32.
    assert mm.bank_conflict_ways([0] * 16 + [128] * 16) == 2


def test_row_reads_are_conflict_free_as_floats_and_as_float4():
    assert mm.warp_row_access(64).banks().ways == 1
    float4 = mm.warp_row_access(128, vector=4).banks()
    assert (float4.phases, float4.lanes_per_phase) == (4, 8)
    assert float4.ways_per_phase == (1, 1, 1, 1) and float4.wavefronts == 4


def test_float4_column_reads_with_4_floats_of_padding_stay_aligned_and_conflict_free():
    """Lesson 04's K tile: rows of d + 4 floats, lane j reads the float4 at (j, c)."""
    for column in (0, 4, 60):
        padded = mm.warp_column_walk(row_floats=64, pad_floats=4, column=column, vector=4)
        assert padded.aligned
        assert padded.banks().ways == 1 and padded.banks().wavefronts == 4
    unpadded = mm.warp_column_walk(row_floats=64, pad_floats=0, vector=4).banks()
    assert unpadded.ways == 8  # the 8 lanes of each phase all start in bank 0
    assert not mm.warp_column_walk(row_floats=64, pad_floats=1, vector=4).aligned


def test_8_byte_accesses_go_in_two_half_warps():
    banks = mm.bank_access(range(0, 256, 8), 8)
    assert (banks.phases, banks.lanes_per_phase, banks.ways, banks.wavefronts) == (2, 16, 1, 2)
    # Lane i and lane i + 16 hit the same banks, but they are in different phases.
    assert banks.lane_banks[0] == banks.lane_banks[16] == (0, 1)


# ------------------------------------------------------------------------------------------------
# The pipeline
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n, load, compute", list(itertools.product([1, 2, 5, 16], [1, 3, 4, 7.5], [0.5, 4, 6])))
def test_makespans_match_the_closed_forms(n, load, compute):
    one = mm.pipeline_timeline(n, load, compute, buffers=1)
    two = mm.pipeline_timeline(n, load, compute, buffers=2)
    assert one.makespan == pytest.approx(n * (load + compute))
    assert two.makespan == pytest.approx(load + (n - 1) * max(load, compute) + compute)
    assert one.makespan == pytest.approx(mm.pipeline_makespan(n, load, compute, 1))
    assert two.makespan == pytest.approx(mm.pipeline_makespan(n, load, compute, 2))
    assert two.makespan <= one.makespan
    assert two.makespan >= max(n * load, n * compute)  # one load and one compute at a time


@pytest.mark.parametrize("buffers", [1, 2, 3])
def test_every_schedule_respects_both_hazards(buffers):
    p = mm.pipeline_timeline(7, 3, 2, buffers)
    for j, s in enumerate(p.tiles):
        assert s.buffer == j % buffers
        assert s.compute_start >= s.load_end  # read-after-write
        if j >= buffers:
            assert s.load_start >= p.tiles[j - buffers].compute_end  # write-after-read
        if j:
            assert s.load_start >= p.tiles[j - 1].load_end and s.compute_start >= p.tiles[j - 1].compute_end


def test_one_buffer_needs_two_barriers_per_tile_and_two_need_one():
    assert mm.barriers_per_tile(1) == 2 and mm.barriers_per_tile(2) == 1
    one, two = mm.pipeline_timeline(5, 2, 3, 1), mm.pipeline_timeline(5, 2, 3, 2)
    assert len(one.barriers) == 10 and one.barriers_per_tile == 2
    assert len(two.barriers) == 6 and two.barriers_per_tile == 1  # one before the loop, one per tile
    assert two.barriers[-1] == two.makespan


def test_stalls_show_which_side_waits():
    memory_bound = mm.pipeline_timeline(4, 5, 2, 2)
    assert memory_bound.load_stalls == ()  # loads run back to back
    assert memory_bound.compute_stalls[0] == (0.0, 5.0)
    compute_bound = mm.pipeline_timeline(4, 2, 5, 2)
    assert len(compute_bound.compute_stalls) == 1  # only the wait for the first tile
    assert compute_bound.load_stalls[0] == (4.0, 7.0)  # tile 2 waits for compute 0 to free buffer 0


# ------------------------------------------------------------------------------------------------
# Bad input: a sentence, not a traceback from deep inside
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda: mm.coalescing([], 4),
    lambda: mm.coalescing(range(33), 1),
    lambda: mm.coalescing([0, -4], 4),
    lambda: mm.coalescing([0, 4], 3),
    lambda: mm.coalescing([0, 2], 4),
    lambda: mm.coalescing(5, 4),
    lambda: mm.bank_access([0.5], 4),
    lambda: mm.warp_row_access(0),
    lambda: mm.warp_row_access(6, vector=4),
    lambda: mm.warp_row_access(64, vector=2),
    lambda: mm.warp_column_walk(rows=33),
    lambda: mm.warp_column_walk(row_floats=8, column=8),
    lambda: mm.pipeline_timeline(0, 1, 1, 2),
    lambda: mm.pipeline_timeline(3, 0, 1, 2),
    lambda: mm.pipeline_timeline(3, 1, float("nan"), 2),
    lambda: mm.pipeline_timeline(3, 1, 1, 0),
    lambda: mm.barriers_per_tile(0),
    lambda: mm.total_coalescing([]),
])
def test_bad_input_raises_a_sentence(call):
    with pytest.raises(ValueError) as error:
        call()
    message = str(error.value)
    assert message.endswith(".") and len(message.split()) >= 5, message
