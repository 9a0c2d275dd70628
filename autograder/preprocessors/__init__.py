"""The nbgrader preprocessors the course adds, one class per module, named after it."""
