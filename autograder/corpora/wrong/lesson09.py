"""Wrong answers for lesson 09 (FlashAttention on Tenstorrent's simulator): the seed prototype's missing
maximum, a buffer never popped (a deadlock), a step that overflows DST, a causal mask off by one, and
assignments that leave one core with most of the work."""
from autograder.corpora.wrong import WrongSolution

_A = "09_dataflow"

_ALPHA_STEP = "with p_buf.wait() as p_blk, alpha_buf.wait() as alpha_blk:"
_ACC_TWO_STEPS = ("""with pv_buf.reserve() as pv_blk:  # P·V in a step of its own: see the DST note above
                                pv_blk.store(p_blk @ v_blk)
                            with pv_buf.wait() as pv_blk, acc_buf.wait() as acc_old, acc_buf.reserve() as acc_blk:
                                acc_blk.store(acc_old * ttl.block.broadcast(alpha_blk, dims=[-1], shape=(1, d_tiles)) + pv_blk)""")
_ACC_ONE_STEP = ("""with acc_buf.wait() as acc_old, acc_buf.reserve() as acc_blk:
                                acc_blk.store(acc_old * ttl.block.broadcast(alpha_blk, dims=[-1], shape=(1, d_tiles)) + p_blk @ v_blk)""")

WRONG = [
    # -- exercise 1: the online-softmax update on one core ----------------------------------------------
    WrongSolution(_A, "one_core_attention", "no-max-subtraction",
                  "computes P = exp(S) without subtracting the row maximum, as the seed prototype did",
                  edits=(("p_blk.store(ttl.math.exp(s_blk - ttl.block.broadcast(m_new, dims=[-1], shape=(1, 1))))",
                          "p_blk.store(ttl.math.exp(s_blk))"),), hint="by each row's max, counted twice"),
    WrongSolution(_A, "one_core_attention", "alpha-never-popped",
                  "stores the rescale factor but never waits for it, so its buffer fills and the kernels deadlock",
                  edits=((_ALPHA_STEP, "with p_buf.wait() as p_blk:"), ("alpha_blk * l_old", "l_old"),
                         ("acc_old * ttl.block.broadcast(alpha_blk, dims=[-1], shape=(1, d_tiles)) + pv_blk",
                          "acc_old + pv_blk")), hint=None),
    WrongSolution(_A, "one_core_attention", "pv-fused-into-acc",
                  "adds P·V to the rescaled accumulator in one step: 3·D/32 tiles of DST, 12 at D = 128",
                  edits=((_ACC_TWO_STEPS, _ACC_ONE_STEP),), hint="store fewer tiles per step"),
    WrongSolution(_A, "one_core_attention", "sum-not-rescaled", "adds the new row sum without rescaling the old one",
                  edits=(("alpha_blk * l_old + ttl.math.reduce_sum", "l_old + ttl.math.reduce_sum"),),
                  hint="l is not rescaled"),
    # -- exercise 2: rows per step ------------------------------------------------------------------------
    WrongSolution(_A, "rows_per_step", "sync-modes-swapped", "gives half sync the 16 tiles of full sync",
                  edits=(("(16 if full_sync else 8)", "(8 if full_sync else 16)"),), hint="full sync"),
    WrongSolution(_A, "rows_per_step", "fp32-not-halved", "forgets that 32-bit tiles take twice the room",
                  edits=(("(16 if full_sync else 8) // (dtype_bits // 16)", "(16 if full_sync else 8)"),),
                  hint="32-bit data"),
    WrongSolution(_A, "rows_per_step", "rounds-up", "rounds the number of rows up",
                  edits=(("return capacity // (operands * block_cols)", "return -(-capacity // (operands * block_cols))"),),
                  hint="round down"),
    # -- exercise 3: query tiles to cores ----------------------------------------------------------------
    WrongSolution(_A, "assign_query_tiles", "contiguous-runs", "gives each core a contiguous run of query tiles",
                  edits=(("    costly_first = sorted(range(q_tiles), key=lambda i: -key_tiles_seen(i, q_tiles, k_tiles, causal))\n"
                          "    for i in costly_first:\n",
                          "    per_core = -(-q_tiles // cores)\n    for i in range(q_tiles):\n"),
                         ("        core = min(range(cores), key=lambda c: (work[c], c))\n",
                          "        core = i // per_core\n")),
                  hint="contiguous runs"),
    WrongSolution(_A, "assign_query_tiles", "round-robin", "deals the tiles out in turn, ignoring their cost",
                  edits=(("    for i in costly_first:\n        core = min(range(cores), key=lambda c: (work[c], c))\n",
                          "    for i in range(q_tiles):\n        core = i % cores\n"),),
                  hint="most expensive tile first"),
    WrongSolution(_A, "assign_query_tiles", "drops-the-last-tile", "forgets the last query tile",
                  edits=(("sorted(range(q_tiles),", "sorted(range(q_tiles - 1),"),), hint=None),
    # -- exercise 4: the grid, causally ------------------------------------------------------------------
    WrongSolution(_A, "grid_attention", "mask-off-by-one", "adds the bias to the tile before the diagonal",
                  edits=(("if causal and j == seen - 1:", "if causal and j == seen - 2:"),), hint=None),
    WrongSolution(_A, "grid_attention", "bias-on-every-tile", "waits for the bias on every key tile of a causal row",
                  edits=(("if causal and j == seen - 1:", "if causal:"),), hint=None),
    WrongSolution(_A, "grid_attention", "scores-unscaled", "forgets the 1/sqrt(D) scale of the scores",
                  edits=(("scores = q_blk @ ttl.block.transpose(k_blk) * ttl.block.fill(scale, shape=(1, 1))",
                          "scores = q_blk @ ttl.block.transpose(k_blk)"),), hint="without the scale"),
]
