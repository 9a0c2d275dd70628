"""``python -m autograder.nbgrader_command ARGS``: nbgrader's command line as the grader starts it.

The same program as ``python -m nbgrader ARGS`` (a TA can type that in a course directory and get the
same result), started without the imports nbgrader never uses (:mod:`autograder.lean_imports`).
"""
from autograder.lean_imports import skip_unused_imports

skip_unused_imports()

from nbgrader.apps.nbgraderapp import main  # noqa: E402  (after the line above, or it has no effect)

if __name__ == "__main__":
    main()
