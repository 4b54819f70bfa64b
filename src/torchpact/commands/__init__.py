"""The commands of the command line: each takes its parsed arguments and returns an ``Outcome``
(``outcome.py``), which ``cli.main`` alone writes out and turns into the exit code."""
