"""Stage 2: grading a batch of submissions (collect, autograde in the sandbox, report, throughput)."""
