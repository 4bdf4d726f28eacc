"""measure: run the kernels on a GPU and time them (the timer, implementations, harness, grid runner)."""
