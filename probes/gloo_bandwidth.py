#!/usr/bin/python3
"""Bandwidth probe between a job's nodes: torch.distributed over gloo, on CPU (docs/network.md).

The agent runs one process per rank of a probe order, with the rendezvous Tianshu sets for any
job (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE) and, where the node has a separate data network,
GLOO_SOCKET_IFNAME. Every rank takes part in:

1. an all-reduce of a float32 tensor of --bytes bytes, repeated for about --seconds: algbw is
   bytes / time per all-reduce, busbw = algbw * 2(n-1)/n (nccl-tests' bus bandwidth of an
   all-reduce, its doc/PERFORMANCE.md), so that a ring's links are compared whatever n is;
2. with two ranks or more, send/recv of the same tensor from rank 0 to the last rank (forward;
   on a two-node probe, the first node to the second) and back (backward), --seconds / 2 each.

Rank 0 writes what it measured to $TIANSHU_PROBE_RESULT (temporary file + rename), GB/s being
1e9 bytes per second:
  {"method": "gloo", "bytes": B, "iterations": N, "busbw_gbps": .., "algbw_gbps": ..,
   "forward_gbps": .., "backward_gbps": ..}

    MASTER_ADDR=127.0.0.1 MASTER_PORT=29600 WORLD_SIZE=1 RANK=0 \\
        /usr/bin/python3 gloo_bandwidth.py --bytes 1048576 --seconds 1
"""
import argparse
import datetime
import json
import math
import os
import sys
import time

import torch
import torch.distributed as dist

WARMUP = 2         # operations before anything is timed (connections, buffers)
CALIBRATION = 3    # operations timed to size the measurement
MAX_ITERATIONS = 1_000_000


def agreed_count(per_op_s, seconds, src):
    """How many operations fit in `seconds`, as `src` estimated it, known to every rank."""
    n = max(1, min(MAX_ITERATIONS, math.ceil(seconds / max(per_op_s, 1e-9))))
    t = torch.tensor([n], dtype=torch.int64)
    dist.broadcast(t, src=src)
    return int(t.item())


def measure_all_reduce(buf, seconds, rank):
    for _ in range(WARMUP):
        dist.all_reduce(buf)
    start = time.perf_counter()
    for _ in range(CALIBRATION):
        dist.all_reduce(buf)
    per_op = (time.perf_counter() - start) / CALIBRATION
    iterations = agreed_count(per_op, seconds, src=0)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iterations):
        dist.all_reduce(buf)  # gloo's all-reduce returns once this rank holds the sum
    elapsed = time.perf_counter() - start
    return iterations, elapsed


def timed_sends(buf, ack, src, dst, count, rank):
    """`count` sends from src to dst, timed at src until dst acknowledged the last one."""
    elapsed = 0.0
    if rank == src:
        start = time.perf_counter()
        for _ in range(count):
            dist.send(buf, dst)
        dist.recv(ack, dst)
        elapsed = time.perf_counter() - start
    elif rank == dst:
        for _ in range(count):
            dist.recv(buf, src)
        dist.send(ack, src)
    return elapsed


def measure_direction(buf, ack, src, dst, seconds, rank):
    """GB/s from src to dst, known to every rank (0 on the ranks that took no part)."""
    timed_sends(buf, ack, src, dst, WARMUP, rank)
    per_op = timed_sends(buf, ack, src, dst, CALIBRATION, rank) / CALIBRATION
    count = agreed_count(per_op, seconds, src=src)
    elapsed = timed_sends(buf, ack, src, dst, count, rank)
    gbps = torch.tensor([buf.numel() * buf.element_size() * count / max(elapsed, 1e-9) / 1e9
                         if rank == src else 0.0], dtype=torch.float64)
    dist.broadcast(gbps, src=src)
    return float(gbps.item())


def write_atomically(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bytes", type=int, required=True, help="message size (a multiple of 4)")
    p.add_argument("--seconds", type=float, required=True, help="time per measurement")
    args = p.parse_args()
    if args.bytes < 4 or not (0 < args.seconds <= 3600):
        p.error("--bytes must be at least 4 and --seconds in (0, 3600]")
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    result_path = os.environ.get("TIANSHU_PROBE_RESULT", "")
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    # A peer that never comes must not hold the probe forever.
    timeout = datetime.timedelta(seconds=max(120.0, 10 * args.seconds))
    dist.init_process_group("gloo", init_method="env://", rank=rank, world_size=world,
                            timeout=timeout)
    elements = max(1, args.bytes // 4)
    nbytes = elements * 4
    buf = torch.ones(elements, dtype=torch.float32)

    iterations, elapsed = measure_all_reduce(buf, args.seconds, rank)
    algbw = nbytes * iterations / max(elapsed, 1e-9) / 1e9
    busbw = algbw * 2 * (world - 1) / world
    forward = backward = 0.0
    if world >= 2:
        ack = torch.zeros(1, dtype=torch.float32)
        last = world - 1
        forward = measure_direction(buf, ack, 0, last, args.seconds / 2, rank)
        backward = measure_direction(buf, ack, last, 0, args.seconds / 2, rank)
    dist.barrier()
    if rank == 0:
        result = {"method": "gloo", "bytes": nbytes, "iterations": iterations,
                  "busbw_gbps": busbw, "algbw_gbps": algbw,
                  "forward_gbps": forward, "backward_gbps": backward}
        print(f"[probe] world {world} bytes {nbytes} iterations {iterations} "
              f"algbw {algbw:.3f} GB/s busbw {busbw:.3f} GB/s "
              f"forward {forward:.3f} GB/s backward {backward:.3f} GB/s", flush=True)
        if result_path:
            write_atomically(result_path, json.dumps(result) + "\n")
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
