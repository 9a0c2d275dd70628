"""Hostile submissions built on lesson 00 (orientation), whose notebook grades in seconds.

Attacks that only hurt the kernel they run in sit in the first exercise, so the second exercise shows
that grading went on. Attacks that may kill the kernel sit in the last exercise: a fresh kernel has
lost the notebook's imports, so only the cells after the last exercise can show that it went on.
"""
from autograder.corpora.hostile import Change, HostileSubmission, attacks

_A = "00_orientation"
_FIRST, _LAST = "attention_flops", "flash_intensity"
_FIRST_TEST, _LAST_TEST = "test_attention_flops", "test_flash_intensity"
_WRONG_FIRST = Change(_FIRST, source="def attention_flops(n_q, n_k, d):\n    return 0")

_TIME_LIMIT = r"limit|time"

HOSTILE = [
    # -- attacks on the machine --------------------------------------------------------------
    HostileSubmission(_A, "infinite-loop", "loops forever", (Change(_FIRST, attacks.INFINITE_LOOP),),
                      loses=(_FIRST_TEST,), reason=_TIME_LIMIT),
    HostileSubmission(_A, "sleeps-past-limit", "sleeps for eleven days", (Change(_FIRST, attacks.SLEEPS_PAST_LIMIT),),
                      loses=(_FIRST_TEST,), reason=_TIME_LIMIT),
    HostileSubmission(_A, "ignores-interrupt", "ignores SIGINT, then loops forever",
                      (Change(_LAST, attacks.IGNORES_INTERRUPT),),
                      loses=(_LAST_TEST,), reason=r"limit|time|kill|interrupt"),
    HostileSubmission(_A, "fork-bomb", f"forks up to {attacks.FORK_BOMB_CAP} processes that sleep ten minutes",
                      (Change(_LAST, attacks.FORK_BOMB),),
                      loses=(_LAST_TEST,), reason=r"process|fork", or_output=r"fork refused after \d+ processes"),
    HostileSubmission(_A, "memory-bomb", "reserves 64 GB in 1 GB blocks, then writes to every page",
                      (Change(_LAST, attacks.MEMORY_BOMB),),
                      loses=(_LAST_TEST,), reason=r"memory", or_output=r"MemoryError|Cannot allocate memory"),
    HostileSubmission(_A, "huge-output", "prints one line of 1 GB", (Change(_LAST, attacks.HUGE_OUTPUT),),
                      loses=(_LAST_TEST,), reason=r"output|limit|time", or_output=r"output truncated"),
    HostileSubmission(_A, "segfault", "crashes the kernel in C code", (Change(_LAST, attacks.SEGFAULT),),
                      loses=(_LAST_TEST,), reason=r"crash|segfault|signal|died"),
    # -- attacks on the course and the other students -----------------------------------------
    # Each replaces its solution, so it scores on that exercise only if the attack worked.
    HostileSubmission(_A, "reads-solutions",
                      "looks for the instructor notebook, the gradebook and other students' notebooks, "
                      "prints them and runs the solution it finds",
                      (Change(_FIRST, attacks.READS_SOLUTIONS),), loses=(_FIRST_TEST,)),
    HostileSubmission(_A, "writes-gradebook",
                      "gives every grade in the gradebook full manual marks, spoils other students' notebooks "
                      "and deletes their timestamps",
                      (Change(_FIRST, attacks.WRITES_GRADEBOOK),), loses=(_FIRST_TEST,)),
    HostileSubmission(_A, "opens-network", "connects to a port on 127.0.0.1 to fetch its answer",
                      (Change(_FIRST, attacks.OPENS_NETWORK),), loses=(_FIRST_TEST,)),
    # -- tampering with the notebook: graded on the instructor's test cells all the same ------
    HostileSubmission(_A, "deletes-tests", "deletes both test cells", (Change(_FIRST_TEST, delete=True),
                                                                      Change(_LAST_TEST, delete=True))),
    HostileSubmission(_A, "deletes-test-of-wrong-answer", "deletes the test of an exercise it got wrong",
                      (_WRONG_FIRST, Change(_FIRST_TEST, delete=True)), loses=(_FIRST_TEST,)),
    HostileSubmission(_A, "test-edited-to-pass", "replaces a test cell's code by `pass`",
                      (Change(_FIRST_TEST, "pass"),)),
    HostileSubmission(_A, "test-of-wrong-answer-edited-to-pass",
                      "replaces by `pass` the test of an exercise it got wrong, and unlocks the cell",
                      (_WRONG_FIRST, Change(_FIRST_TEST, "pass", metadata=(("locked", False),))),
                      loses=(_FIRST_TEST,)),
    HostileSubmission(_A, "points-raised", "sets a test cell's points to 100",
                      (Change(_FIRST_TEST, metadata=(("points", 100),)),)),
]
