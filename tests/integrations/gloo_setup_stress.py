"""Stress gloo's connection setup, outside pytest: two local ranks build `--groups` gloo
process groups one after another (each a fresh full mesh over one TCPStore), allreduce once
in each and drop it, with small random delays on both sides. Run several at once beside busy
loops to starve them. A rank that aborts (the known upstream SIGABRT paths in gloo's tcp
transport are in connection setup and teardown) exits non-zero with its Python stack.

    python tests/integrations/gloo_setup_stress.py --groups 1500

Used to look for the cause of test_trl_accelerate.py's one failure on record
(docs/integrations.md, "The accelerate test's one failure")."""

from __future__ import annotations

import argparse
import os
import random
import socket
import subprocess
import sys
import time
from datetime import timedelta


def _rank(rank: int, port: int, groups: int) -> None:
    import torch
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0, timeout=timedelta(seconds=300))
    rng = random.Random(rank)
    start = time.time()
    for i in range(groups):
        time.sleep(rng.random() * 0.01)  # vary which rank reaches the mesh first
        group = dist.ProcessGroupGloo(dist.PrefixStore(f"g{i}", store), rank, 2, timedelta(seconds=300))
        x = torch.ones(4)
        group.allreduce([x]).wait()
        if x[0].item() != 2.0:
            raise SystemExit(f"rank {rank}: allreduce of group {i} gave {x[0].item()}, not 2")
        del group
    print(f"rank {rank}: {groups} groups in {time.time() - start:.1f} s", flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--groups", type=int, default=1500, help="gloo groups each rank builds")
    p.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.rank is not None:
        _rank(args.rank, args.port, args.groups)
        return 0
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONFAULTHANDLER": "1"}
    ranks = [subprocess.Popen([sys.executable, __file__, "--rank", str(r), "--port", str(port),
                               "--groups", str(args.groups)], env=env) for r in (0, 1)]
    codes = [r.wait() for r in ranks]
    print(f"exit codes: rank 0 {codes[0]}, rank 1 {codes[1]}")
    return 0 if codes == [0, 0] else 1


if __name__ == "__main__":
    sys.exit(main())
