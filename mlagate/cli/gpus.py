"""`mlagate gpus`: is this host's GPU free for a benchmark? Exit 0 idle, 1 busy, 2 no Docker engine."""

from mlagate import exits
from mlagate.measure import gpus


def add_parser(sub):
    p = sub.add_parser("gpus", help="check that no container or process holds the GPU before a benchmark")
    p.add_argument("--stop-stale", action="store_true",
                   help="stop this project's running GPU containers (never anyone else's)")
    p.add_argument("--allow-busy", action="store_true", help="report a busy GPU but exit 0")
    p.add_argument("--max-used-mib", type=int, default=1024,
                   help="VRAM in use above which a GPU is busy (default 1024: an idle GPU "
                        "still reports the memory its driver reserves)")
    p.add_argument("--gpu", type=int, action="append",
                   help="only this GPU index counts for the memory check (repeatable; default: all)")
    p.set_defaults(func=run)


def run(args, cfg) -> int:
    if args.max_used_mib < 0:
        raise ValueError(f"--max-used-mib must be >= 0, got {args.max_used_mib}")
    client = gpus.docker_client()  # OSError -> the CLI prints it and exits 2
    busy, stale_left = [], False
    for h in gpus.gpu_holders(client.containers.list(ignore_removed=True), own_id=gpus.own_container_id()):
        who = "stale mlagate container" if h.ours else "container of another project"
        print(f"{who} {h.name} ({h.id[:12]}, image {h.image or '?'}) holds {', '.join(h.access)}")
        if h.ours and args.stop_stale:
            client.containers.get(h.id).stop()
            print(f"  stopped {h.name}")
            continue
        busy.append(f"container {h.name}")
        stale_left = stale_left or h.ours
    tool, used = gpus.vram_used()
    if tool is None:
        print("memory: neither rocm-smi nor nvidia-smi is installed; VRAM not checked")
    for gpu, nbytes in sorted(used.items()):
        over = (not args.gpu or gpu in args.gpu) and nbytes > args.max_used_mib * 2**20
        print(f"GPU {gpu}: {nbytes / 2**20:.0f} MiB in use ({tool})" + (", over --max-used-mib" if over else ""))
        if over:
            busy.append(f"GPU {gpu} memory")
    if not busy:
        print("GPUs idle")
        return exits.OK
    if args.allow_busy:
        print(f"GPU busy ({', '.join(busy)}); going on because of --allow-busy")
        return exits.OK
    hint = "--stop-stale stops this project's containers" if stale_left else "rocm-smi / nvidia-smi show the processes"
    print(f"GPU busy: {', '.join(busy)} ({hint}; --allow-busy goes on anyway)")
    return exits.BUSY
