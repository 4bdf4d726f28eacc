"""The lab: probes and studies that ask the gate and its kernels questions the product does not answer by
itself (lab/README.md lists each with its command). Not installed, not imported by mlagate; run a script from the
repository root as ``python -m lab.<name>``; tests/test_lab.py imports each and runs what a CPU can."""
