"""The course's instructor tooling, apart from what learners import (`import grader` never loads it).

    python -m grader.tools.build     # solutions/ -> notebooks/ (--check, --sync-setup-cells)
    python -m grader.tools.suite     # the benchmark suite: every course kernel against PyTorch, on one GPU
"""
