"""store: asv's results directory, the sidecars beside it, the results branch, and `record`."""
