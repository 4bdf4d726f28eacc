"""build: lower and compile every kernel on a CPU and record its compiler resources."""
