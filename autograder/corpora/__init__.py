"""Submissions that test the grader: ``wrong`` (plausible wrong answers that must lose their points) and
``hostile`` (submissions that attack the grader and must harm nothing)."""
