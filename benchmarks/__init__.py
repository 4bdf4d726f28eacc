"""asv benchmarks for the MLA decode kernels (thin shells over mlagate)."""
