"""A small model of how a warp's loads meet memory, and of a one- or two-buffer tile pipeline (lesson 04).

Everything here is arithmetic on addresses and times: no GPU is needed, and every number can be checked
by hand. The model is NVIDIA's, simplified where the comments say so.

Global memory
    Memory is served in 32-byte *sectors*; a 128-byte cache line holds 4 of them. A warp executes a load
    as one instruction, and the instruction is one *request*. Lane ``i`` accesses ``access_bytes`` bytes
    starting at its own byte address; the sectors the request touches are the distinct 32-byte-aligned
    segments those bytes fall in, and each of them is moved whole. So

        efficiency = bytes requested / (sectors × 32)

    where "bytes requested" counts each distinct byte once (lanes that ask for the same byte share it, so
    the efficiency never exceeds 100%). The standard cases:

    - 32 lanes load 32 consecutive floats (scalar, 4 bytes each): 128 B in 4 sectors, 100%;
    - 32 lanes load 32 consecutive float4s (16 bytes each): 512 B in 16 sectors, 100%, and in one
      instruction where scalar loads need four;
    - lane ``j`` loads element ``(j, c)`` of a row-major fp32 matrix whose rows are 8 floats (32 bytes)
      or longer: every lane is in a sector of its own, 32 sectors for 128 useful bytes, 12.5%;
    - the same row as the first case, starting 4 bytes late: 5 sectors, 80%.

    Simplifications: sectors are counted per instruction (a sector that two instructions touch counts
    twice; no L1 or L2 hit is modelled), latency and bandwidth are not modelled, and an access must be
    naturally aligned (a float4 starts at a multiple of 16 bytes), which the hardware also demands: a
    misaligned vector access faults, and here it raises ValueError.

Shared memory
    32 banks, each 4 bytes wide: 4-byte word ``w`` (byte address // 4) lives in bank ``w % 32``. Each bank
    delivers one word per cycle. Lanes that read the SAME word get it broadcast, at no cost; lanes that
    read DIFFERENT words of the same bank are served one after the other. The conflict degree ("ways")
    of an access is the largest number of distinct words any one bank is asked for; 1 means
    conflict-free, 32 means the warp is served one lane at a time.

    Wide accesses are split into *phases*, each served on its own: a warp's 8-byte accesses in 2 phases
    of 16 lanes (half-warps), its 16-byte accesses in 4 phases of 8 lanes (quarter-warps), so that a
    phase asks for at most 32 words, one bank's worth each. Conflicts are counted within a phase; lanes
    in different phases never conflict. The access takes one *wavefront* (a pass through the banks) per
    way in each phase: a conflict-free float4 access takes 4 wavefronts (the minimum for 512 bytes, as
    the banks deliver 128 bytes per wavefront), a conflict-free scalar access 1.

    Simplifications: the phase split is the documented rule of thumb (a lane's 16 bytes are four
    consecutive words, in four consecutive banks); real hardware may merge phases whose lanes all
    broadcast, and 1- and 2-byte accesses are treated as reads of the word that holds them.

The tile pipeline
    A loop over ``n`` K/V tiles: load tile j into shared memory (time ``L``), then compute on it (time
    ``C``). With one buffer the load of tile j + 1 must wait until the compute on tile j is finished
    with the buffer, so nothing overlaps: ``n·(L + C)``. With two buffers the load of tile j + 1 (into
    the other buffer) runs while tile j is computed on; the load of tile j + 2 waits until compute j has
    released its buffer. Loads are served one at a time, and so are computes, so the makespan is
    ``L + (n − 1)·max(L, C) + C``: the first load and the last compute stick out, and every step in
    between costs whichever of load and compute is longer. See :func:`pipeline_timeline` and
    :func:`barriers_per_tile`.

    Simplifications: ``L`` and ``C`` are the same for every tile, a load is one block of time (in a
    real kernel it is many warps' loads, and other warps hide its latency), and barriers cost nothing
    themselves: they only order things.
"""
from __future__ import annotations

from dataclasses import dataclass
from numbers import Integral, Real
from typing import Iterable, Sequence

__all__ = [
    "WARP", "SECTOR_BYTES", "LINE_BYTES", "BANKS", "BANK_BYTES", "ACCESS_WIDTHS",
    "WarpAccess", "Coalescing", "BankAccess",
    "sectors_touched", "sectors_of_bytes", "coalescing", "total_coalescing", "warp_instructions",
    "bank_access", "bank_conflict_ways", "phases_of",
    "warp_row_access", "warp_column_walk",
    "TileSchedule", "Pipeline", "pipeline_timeline", "pipeline_makespan", "barriers_per_tile",
]

WARP = 32            # lanes in a warp
SECTOR_BYTES = 32    # the unit global memory moves
LINE_BYTES = 128     # a cache line: 4 sectors
BANKS = 32           # shared-memory banks
BANK_BYTES = 4       # width of one bank (one word)
ACCESS_WIDTHS = (1, 2, 4, 8, 16)  # bytes one lane can load at once (16 = a float4)
FLOAT_BYTES = 4


# ------------------------------------------------------------------------------------------------
# Checking what comes in
# ------------------------------------------------------------------------------------------------

def _whole(value, name: str, low: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, Integral) or value < low:
        raise ValueError(f"{name} must be a whole number no smaller than {low}; it is {value!r}.")
    return int(value)


def _width(access_bytes) -> int:
    if isinstance(access_bytes, bool) or access_bytes not in ACCESS_WIDTHS:
        raise ValueError(f"access_bytes must be one of {ACCESS_WIDTHS} (a float is 4, a float4 is 16); "
                         f"it is {access_bytes!r}.")
    return int(access_bytes)


def _lanes(byte_addresses, access_bytes: int) -> tuple[int, ...]:
    """The addresses as a tuple of ints, after checking there are 1..32 of them, each naturally aligned."""
    try:
        addresses = tuple(byte_addresses)
    except TypeError:
        raise ValueError("byte_addresses must be a sequence of byte addresses, one per active lane.") from None
    if not 1 <= len(addresses) <= WARP:
        raise ValueError(f"A warp access has between 1 and {WARP} active lanes; {len(addresses)} addresses were given.")
    addresses = tuple(_whole(a, f"The address of lane {i}") for i, a in enumerate(addresses))
    for lane, address in enumerate(addresses):
        if address % access_bytes:
            raise ValueError(f"Lane {lane} accesses {access_bytes} bytes at byte {address}, which is not a multiple "
                             f"of {access_bytes}: a misaligned address, which faults on the GPU.")
    return addresses


# ------------------------------------------------------------------------------------------------
# A warp's access
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class WarpAccess:
    """One warp instruction: active lane ``i`` accesses ``access_bytes`` bytes from ``byte_addresses[i]``.

    Built by :func:`warp_row_access` and :func:`warp_column_walk`. Alignment is not checked here (a
    picture may want to show a misaligned pattern); it is checked when the access is costed.
    """

    byte_addresses: tuple[int, ...]
    access_bytes: int

    @property
    def aligned(self) -> bool:
        return all(a % self.access_bytes == 0 for a in self.byte_addresses)

    def coalescing(self) -> "Coalescing":
        return coalescing(self.byte_addresses, self.access_bytes)

    def banks(self) -> "BankAccess":
        return bank_access(self.byte_addresses, self.access_bytes)


def warp_row_access(row_floats: int, vector: int = 1, pad_floats: int = 0, offset_bytes: int = 0,
                    lanes: int = WARP) -> WarpAccess:
    """Lanes reading consecutive elements of a row-major fp32 tile, as a tile copy does.

    Lane ``j`` reads float ``j`` (``vector=1``) or the float4 holding floats ``4j .. 4j + 3``
    (``vector=4``), counting along the rows of a tile whose rows hold ``row_floats`` floats and are
    stored ``row_floats + pad_floats`` floats apart, starting at byte ``offset_bytes``. With no padding
    the lanes read one contiguous run of ``32 × 4 × vector`` bytes; a warp that reads more than a row
    goes on with the next row, past the padding.
    """
    row_floats = _whole(row_floats, "row_floats", 1)
    pad_floats = _whole(pad_floats, "pad_floats")
    offset_bytes = _whole(offset_bytes, "offset_bytes")
    lanes = _whole(lanes, "lanes", 1)
    if vector not in (1, 4):
        raise ValueError(f"vector must be 1 (a float per lane) or 4 (a float4 per lane); it is {vector!r}.")
    if lanes > WARP:
        raise ValueError(f"A warp has {WARP} lanes; lanes is {lanes}.")
    if row_floats % vector:
        raise ValueError(f"Rows of {row_floats} floats do not split into float4s: a float4 would straddle two rows "
                         "(lesson 04 needs D to be a multiple of 4).")
    stride = row_floats + pad_floats
    addresses = []
    for j in range(lanes):
        row, column = divmod(j * vector, row_floats)
        addresses.append(offset_bytes + (row * stride + column) * FLOAT_BYTES)
    return WarpAccess(tuple(addresses), vector * FLOAT_BYTES)


def warp_column_walk(rows: int = WARP, row_floats: int = 64, pad_floats: int = 0, column: int = 0,
                     vector: int = 1, offset_bytes: int = 0) -> WarpAccess:
    """Lane ``j`` reads element ``(j, column)`` of a row-major fp32 tile with rows of ``row_floats + pad_floats``.

    This is how the lanes of a warp read a K tile in lessons 03 and 04 (lane j owns key j). With
    ``vector=4`` lane j reads the float4 at columns ``column .. column + 3`` of row j, as lesson 04's dot
    products do; that is aligned only when ``row_floats + pad_floats`` and ``column`` are multiples of 4.
    """
    rows = _whole(rows, "rows", 1)
    row_floats = _whole(row_floats, "row_floats", 1)
    pad_floats = _whole(pad_floats, "pad_floats")
    column = _whole(column, "column")
    offset_bytes = _whole(offset_bytes, "offset_bytes")
    if rows > WARP:
        raise ValueError(f"A warp has {WARP} lanes, one row each; rows is {rows}.")
    if vector not in (1, 4):
        raise ValueError(f"vector must be 1 (a float per lane) or 4 (a float4 per lane); it is {vector!r}.")
    if column + vector > row_floats:
        raise ValueError(f"Column {column} (reading {vector} float(s)) lies outside a row of {row_floats} floats.")
    stride = row_floats + pad_floats
    return WarpAccess(tuple(offset_bytes + (j * stride + column) * FLOAT_BYTES for j in range(rows)),
                      vector * FLOAT_BYTES)


# ------------------------------------------------------------------------------------------------
# Global memory: sectors
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Coalescing:
    """What one or more warp instructions cost in global memory (see the module docstring)."""

    instructions: int          # one request each
    lanes: int                 # active lanes, summed over instructions
    access_bytes: int
    sectors: int               # 32-byte sectors moved, summed over instructions
    sector_ids: tuple[int, ...]  # the distinct sectors (byte address // 32), sorted
    bytes_requested: int       # distinct bytes the lanes asked for, summed over instructions
    bytes_moved: int           # sectors × 32

    @property
    def requests(self) -> int:
        """A warp instruction is one request to the memory system."""
        return self.instructions

    @property
    def efficiency(self) -> float:
        """Useful share of the bytes moved: 1.0 when every byte of every sector touched was asked for."""
        return self.bytes_requested / self.bytes_moved

    @property
    def sectors_per_request(self) -> float:
        return self.sectors / self.instructions

    def summary(self) -> str:
        return (f"{self.instructions} instruction(s), {self.sectors} sector(s) of {SECTOR_BYTES} B: "
                f"{self.bytes_requested} B requested, {self.bytes_moved} B moved, efficiency {self.efficiency:.1%}")


def sectors_touched(byte_addresses: Sequence[int], access_bytes: int = 4) -> tuple[int, ...]:
    """The distinct 32-byte sectors (byte address // 32, sorted) that one warp instruction touches.

    Lane ``i`` accesses bytes ``byte_addresses[i] .. byte_addresses[i] + access_bytes - 1``. Its length is
    the number of sectors the request moves.
    """
    access_bytes = _width(access_bytes)
    addresses = _lanes(byte_addresses, access_bytes)
    # A naturally aligned access of at most 16 bytes never crosses a 32-byte boundary.
    return tuple(sorted({a // SECTOR_BYTES for a in addresses}))


def sectors_of_bytes(starts: Sequence[int], length: int) -> tuple[int, ...]:
    """The distinct 32-byte sectors (sorted) that the byte ranges ``start .. start + length - 1`` fall in.

    Any start and any length: what the lanes *need*, however it is loaded. One load of ``length`` bytes must
    start at a multiple of ``length`` (:func:`sectors_touched` refuses anything else, as the GPU does); a
    range that does not (four floats starting 8 bytes into a sector) is read by narrower loads, which fetch
    these same sectors, and such a range can straddle a sector boundary: two sectors for one lane.
    """
    length = _whole(length, "length", low=1)
    sectors = set()
    for i, start in enumerate(starts):
        start = _whole(start, f"the start of range {i}")
        sectors.update(range(start // SECTOR_BYTES, (start + length - 1) // SECTOR_BYTES + 1))
    return tuple(sorted(sectors))


def coalescing(byte_addresses: Sequence[int], access_bytes: int = 4) -> Coalescing:
    """The cost of one warp instruction in global memory: sectors moved, and the share of them used."""
    access_bytes = _width(access_bytes)
    addresses = _lanes(byte_addresses, access_bytes)
    sectors = sectors_touched(addresses, access_bytes)
    requested = len({a + k for a in addresses for k in range(access_bytes)})
    return Coalescing(1, len(addresses), access_bytes, len(sectors), sectors, requested, len(sectors) * SECTOR_BYTES)


def total_coalescing(costs: Iterable[Coalescing]) -> Coalescing:
    """The sum of several instructions' costs (each instruction moves its own sectors; no cache is modelled)."""
    costs = list(costs)
    if not costs:
        raise ValueError("total_coalescing needs at least one instruction's cost.")
    widths = {c.access_bytes for c in costs}
    return Coalescing(
        instructions=sum(c.instructions for c in costs),
        lanes=sum(c.lanes for c in costs),
        access_bytes=widths.pop() if len(widths) == 1 else 0,  # 0: the instructions differ in width
        sectors=sum(c.sectors for c in costs),
        sector_ids=tuple(sorted({s for c in costs for s in c.sector_ids})),
        bytes_requested=sum(c.bytes_requested for c in costs),
        bytes_moved=sum(c.bytes_moved for c in costs),
    )


def warp_instructions(n_floats: int, vector: int = 1) -> int:
    """Load instructions a warp needs to read ``n_floats`` floats, ``vector`` floats per lane per instruction."""
    n_floats = _whole(n_floats, "n_floats", 1)
    if vector not in (1, 2, 4):
        raise ValueError(f"vector must be 1, 2 or 4 floats per lane; it is {vector!r}.")
    return -(-n_floats // (WARP * vector))


# ------------------------------------------------------------------------------------------------
# Shared memory: banks
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class BankAccess:
    """What one warp instruction costs in shared memory (see the module docstring)."""

    access_bytes: int
    phases: int                     # 1 for ≤ 4-byte accesses, 2 for 8-byte, 4 for 16-byte
    lanes_per_phase: int
    distinct_words: tuple[tuple[int, ...], ...]  # [phase][bank]: distinct words asked of that bank
    lane_banks: tuple[tuple[int, ...], ...]      # [lane]: the banks the lane's bytes lie in

    @property
    def ways_per_phase(self) -> tuple[int, ...]:
        return tuple(max(1, max(row)) for row in self.distinct_words)

    @property
    def ways(self) -> int:
        """Conflict degree: 1 is conflict-free, n means some bank serves n different words one after the other."""
        return max(self.ways_per_phase)

    @property
    def wavefronts(self) -> int:
        """Passes through the banks: the sum over phases of each phase's ways."""
        return sum(self.ways_per_phase)

    @property
    def conflict_free(self) -> bool:
        return self.ways == 1


def phases_of(access_bytes: int) -> int:
    """How many phases a warp's shared-memory access of this width is served in: 32 lanes × width / 128 bytes."""
    access_bytes = _width(access_bytes)
    return max(1, WARP * access_bytes // (BANKS * BANK_BYTES))


def bank_access(byte_addresses: Sequence[int], access_bytes: int = 4) -> BankAccess:
    """Banks hit by one warp instruction on shared memory, phase by phase, with broadcasts counted once.

    ``byte_addresses[i]`` is lane i's byte address in shared memory (give word addresses × 4). Lanes are
    assigned to phases in order: lanes 0-7 are the first phase of a 16-byte access, 8-15 the second, ...
    """
    access_bytes = _width(access_bytes)
    addresses = _lanes(byte_addresses, access_bytes)
    phases = phases_of(access_bytes)
    per_phase = WARP // phases
    words_per_lane = max(1, access_bytes // BANK_BYTES)
    lane_words = [[a // BANK_BYTES + k for k in range(words_per_lane)] for a in addresses]
    distinct = []
    for phase in range(phases):
        banks: list[set[int]] = [set() for _ in range(BANKS)]
        for words in lane_words[phase * per_phase:(phase + 1) * per_phase]:
            for word in words:
                banks[word % BANKS].add(word)
        distinct.append(tuple(len(b) for b in banks))
    return BankAccess(access_bytes, phases, per_phase, tuple(distinct),
                      tuple(tuple(w % BANKS for w in words) for words in lane_words))


def bank_conflict_ways(byte_addresses: Sequence[int], access_bytes: int = 4) -> int:
    """The conflict degree of one warp instruction on shared memory: 1 = conflict-free, 32 = fully serialized.

    The largest number of DISTINCT words any bank is asked for within one phase (lanes reading the same
    word share one broadcast). For the number of passes through the banks, phases included, use
    ``bank_access(...).wavefronts``.
    """
    return bank_access(byte_addresses, access_bytes).ways


# ------------------------------------------------------------------------------------------------
# The tile pipeline
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TileSchedule:
    """When tile ``tile`` (held in buffer ``buffer``) is loaded and computed on."""

    tile: int
    buffer: int
    load_start: float
    load_end: float
    compute_start: float
    compute_end: float


@dataclass(frozen=True)
class Pipeline:
    """A whole loop over the tiles: its schedule, barriers, stalls and makespan."""

    n_tiles: int
    load_time: float
    compute_time: float
    buffers: int
    tiles: tuple[TileSchedule, ...]
    barriers: tuple[float, ...]               # times at which the block synchronizes
    compute_stalls: tuple[tuple[float, float], ...]  # compute idle, waiting for a tile to arrive (read-after-write)
    load_stalls: tuple[tuple[float, float], ...]     # loads idle, waiting for a free buffer (write-after-read)

    @property
    def makespan(self) -> float:
        return self.tiles[-1].compute_end

    @property
    def barriers_per_tile(self) -> int:
        return barriers_per_tile(self.buffers)


def barriers_per_tile(buffers: int) -> int:
    """Block-wide barriers (``__syncthreads()``) each tile needs: 2 with one buffer, 1 with two or more.

    Two hazards must be fenced on every buffer that is reused:

    - read-after-write: no thread may read a tile until every thread has finished writing its share
      of it, so a barrier lies between the load of tile t and the compute on tile t;
    - write-after-read: no thread may overwrite a buffer while another thread is still reading the
      tile it held, so a barrier lies between the compute on the old tile and the load of the new one.

    With one buffer the two barriers fall at different places in each iteration (after the load: RAW;
    after the compute, before the next load into the same buffer: WAR), so each tile pays 2. With two
    buffers, iteration t loads tile t + 1 into buffer (t + 1) % 2 and computes on buffer t % 2, and a
    single barrier at the end of the iteration does both jobs: it separates the writes of tile t + 1
    from their reads in iteration t + 1 (RAW), and the reads of buffer t % 2 from its next writes,
    with tile t + 2 in iteration t + 1 (WAR). One more barrier before the loop publishes tile 0.
    """
    buffers = _whole(buffers, "buffers", 1)
    return 2 if buffers == 1 else 1


def _time(value, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, Real) or not value > 0 or value == float("inf"):
        raise ValueError(f"{name} must be a positive, finite number of time units; it is {value!r}.")
    return float(value)


def pipeline_timeline(n_tiles: int, load_time: float, compute_time: float, buffers: int = 2) -> Pipeline:
    """Schedule ``n_tiles`` loads and computes over ``buffers`` shared-memory buffers, each as early as allowed.

    Loads are served one at a time and so are computes. Tile j lives in buffer ``j % buffers``:

    - its load starts when the previous load is done and the compute on tile ``j - buffers`` (the last
      tile in that buffer) is done with it: the write-after-read hazard;
    - its compute starts when its load is done (read-after-write) and the previous compute is done.

    One buffer gives ``n·(L + C)``; two or more give ``L + (n − 1)·max(L, C) + C``.
    """
    n_tiles = _whole(n_tiles, "n_tiles", 1)
    load_time = _time(load_time, "load_time")
    compute_time = _time(compute_time, "compute_time")
    buffers = _whole(buffers, "buffers", 1)

    tiles: list[TileSchedule] = []
    compute_stalls: list[tuple[float, float]] = []
    load_stalls: list[tuple[float, float]] = []
    for j in range(n_tiles):
        previous_load_end = tiles[-1].load_end if tiles else 0.0
        buffer_free = tiles[j - buffers].compute_end if j >= buffers else 0.0
        load_start = max(previous_load_end, buffer_free)
        if load_start > previous_load_end:
            load_stalls.append((previous_load_end, load_start))
        load_end = load_start + load_time
        previous_compute_end = tiles[-1].compute_end if tiles else 0.0
        compute_start = max(load_end, previous_compute_end)
        if compute_start > previous_compute_end:
            compute_stalls.append((previous_compute_end, compute_start))
        tiles.append(TileSchedule(j, j % buffers, load_start, load_end, compute_start, compute_start + compute_time))

    if buffers == 1:
        # Before each load (the buffer is free: WAR) and after it (the tile is complete: RAW).
        barriers = [t for s in tiles for t in (s.load_start, s.load_end)]
    else:
        # After the first load, then at the end of each iteration (load of t + 1 and compute on t both done).
        barriers = [tiles[0].load_end]
        for j, s in enumerate(tiles):
            next_load_end = tiles[j + 1].load_end if j + 1 < n_tiles else 0.0
            barriers.append(max(s.compute_end, next_load_end))
    return Pipeline(n_tiles, load_time, compute_time, buffers, tuple(tiles), tuple(barriers),
                    tuple(compute_stalls), tuple(load_stalls))


def pipeline_makespan(n_tiles: int, load_time: float, compute_time: float, buffers: int = 2) -> float:
    """The closed form of :func:`pipeline_timeline`'s makespan."""
    n_tiles = _whole(n_tiles, "n_tiles", 1)
    load_time = _time(load_time, "load_time")
    compute_time = _time(compute_time, "compute_time")
    if _whole(buffers, "buffers", 1) == 1:
        return n_tiles * (load_time + compute_time)
    return load_time + (n_tiles - 1) * max(load_time, compute_time) + compute_time
