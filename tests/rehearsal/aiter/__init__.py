"""CPU stand-in for aiter (ROCm/aiter at c16d44b9), for the MI300X rehearsal only."""
