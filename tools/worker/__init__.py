"""The sandbox worker: the only code that imports torch/triton or runs generated code.

Run as `python -m tools.worker JOB.json RESULT.json` (see tools/sandbox.py)."""
