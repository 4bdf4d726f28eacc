"""decide: head against base, pure (no I/O): the verdict, its statistics, build-resource rules."""
