"""store: what a record writes and the gate reads.

results_file  one asv results file, read with every value checked
results       a results directory: each commit's results, and the sidecars beside them
env           a record's env sidecar (GPU, platform, versions, clocks) read back typed
files         writing: the store's lock, whole files, a record installed all or nothing
branch        a git branch as the store (CI checks it out, records into it, pushes)
record        `mlagate record`: run asv on a commit and install what it wrote
merge         `mlagate results merge`: runners' shards of one commit joined into one record
errors        StoreError and GateError
"""
