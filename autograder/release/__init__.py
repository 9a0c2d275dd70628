"""Stage 1: building the student release from ``solutions/`` (``python -m autograder release``)."""
