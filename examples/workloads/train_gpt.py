#!/usr/bin/python3
"""Train a small GPT with torch.distributed and DistributedDataParallel, as a Tianshu job.

Rendezvous from the environment Tianshu sets (MASTER_ADDR, MASTER_PORT, WORLD_SIZE, RANK,
LOCAL_RANK); gloo on CPU, NCCL when a GPU is visible. Checkpoints every --checkpoint-every
steps and when SIGUSR1 arrives (all ranks agree on the step through an all-reduce), into
$TIANSHU_CHECKPOINT_DIR (this attempt's directory: step-NNNNNNNN.pt plus a `latest` pointer of
its own), then, after a barrier, writes the rank's marker $TIANSHU_CHECKPOINT_MARKER =
{"step": N, "path": ...} that the agent waits for (rank 0's makes the job's `latest`). Resumes
from $TIANSHU_RESUME_FROM, else from the newest checkpoint in the directory. Creates
$TIANSHU_READY_FILE once its rendezvous and resume are done: the agent sends SIGUSR1 only after
that (a signal inside torch's rendezvous fails it with "Interrupted system call"). Logs one line
per --log-every steps: step, loss, tokens/s. Appends one line per step to
$TIANSHU_PROGRESS_FILE when set, which the agent reads for the heartbeat:
{"step": N, "step_time_s": S, "time": T, "samples_per_s": X, "total_steps": M}.

    WORLD_SIZE=1 RANK=0 TIANSHU_CHECKPOINT_DIR=/tmp/ck /usr/bin/python3 train_gpt.py --steps 200
"""
import argparse
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import tinygpt  # noqa: E402

CHECKPOINT_REQUESTED = False


def on_sigusr1(signum, frame):
    global CHECKPOINT_REQUESTED
    CHECKPOINT_REQUESTED = True


def log(rank, msg):
    print(f"[rank {rank}] {msg}", flush=True)


def atomic_write(path, data: bytes):
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def newest_checkpoint(ckpt_dir):
    if not ckpt_dir:
        return None
    latest = os.path.join(ckpt_dir, "latest")
    if os.path.exists(latest):
        with open(latest) as f:
            name = f.read().strip()
        path = name if os.path.isabs(name) else os.path.join(ckpt_dir, name)
        if os.path.exists(path):
            return path
    found = sorted(p for p in os.listdir(ckpt_dir) if p.startswith("step-") and p.endswith(".pt"))
    return os.path.join(ckpt_dir, found[-1]) if found else None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300, help="total steps (across restarts)")
    p.add_argument("--checkpoint-every", type=int, default=50)
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--batch", type=int, default=8, help="sequences per rank per step")
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--d-model", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--lr", type=float, default=5e-3)
    p.add_argument("--step-sleep", type=float, default=0.0,
                   help="seconds to sleep per step (to make a run last for tests)")
    p.add_argument("--seed", type=int, default=1234)
    args = p.parse_args()

    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    ckpt_dir = os.environ.get("TIANSHU_CHECKPOINT_DIR", "")
    marker = os.environ.get("TIANSHU_CHECKPOINT_MARKER", "")
    if ckpt_dir:
        os.makedirs(ckpt_dir, exist_ok=True)

    signal.signal(signal.SIGUSR1, on_sigusr1)
    # Restart system calls a SIGUSR1 interrupts (SA_RESTART): a late signal during start-up is
    # then merely remembered. Calls the kernel never restarts (poll) are why the agent also
    # waits for the ready file below.
    signal.siginterrupt(signal.SIGUSR1, False)
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // max(1, local_world)))

    use_cuda = torch.cuda.is_available() and os.environ.get("CUDA_VISIBLE_DEVICES", "x") != ""
    device = torch.device(f"cuda:{local_rank % max(1, torch.cuda.device_count())}"
                          if use_cuda else "cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    backend = "nccl" if use_cuda else "gloo"
    distributed = world > 1
    if distributed:
        dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world)

    torch.manual_seed(args.seed)  # identical initial weights on every rank
    model = tinygpt.TinyGPT(d_model=args.d_model, layers=args.layers, heads=args.heads,
                            seq=args.seq).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    step = 0
    resume = os.environ.get("TIANSHU_RESUME_FROM") or newest_checkpoint(ckpt_dir)
    if resume and os.path.exists(resume):
        state = torch.load(resume, map_location="cpu")
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        step = int(state["step"])
        log(rank, f"resumed from step {step} ({resume}, world {world})")
    else:
        log(rank, f"starting from step 0 ({model.parameters_count()} parameters, backend "
                  f"{backend}, world {world})")
    ddp = DDP(model) if distributed else model
    gen = torch.Generator().manual_seed(args.seed * 1000 + rank * 7919 + step)
    loss_fn = torch.nn.CrossEntropyLoss()

    def checkpoint(reason):
        path = os.path.join(ckpt_dir, f"step-{step:08d}.pt")
        if rank == 0 and ckpt_dir:
            tmp = path + ".tmp"
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                        "step": step}, tmp)
            os.replace(tmp, path)
            atomic_write(os.path.join(ckpt_dir, "latest"), os.path.basename(path).encode())
        if distributed:
            dist.barrier()
        if marker:
            atomic_write(marker, json.dumps({"step": step, "path": path}).encode())
        log(rank, f"checkpoint step {step} ({reason}) -> {path}")

    global CHECKPOINT_REQUESTED
    t0 = time.time()
    tokens = 0
    window_loss = 0.0
    window_n = 0
    ready = os.environ.get("TIANSHU_READY_FILE", "")
    if ready:  # rendezvous and resume done: checkpoint signals are safe from here on
        atomic_write(ready, b"ready\n")
    # One line per step, appended (opened once, flushed per line: a few hundred bytes a step).
    progress_path = os.environ.get("TIANSHU_PROGRESS_FILE", "")
    progress = open(progress_path, "a", buffering=1) if progress_path else None
    while step < args.steps:
        step_start = time.perf_counter()
        x, y = tinygpt.batch(gen, args.batch, args.seq, device)
        logits = ddp(x)
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        step += 1
        tokens += x.numel() * world
        window_loss += loss.item()
        window_n += 1
        if args.step_sleep > 0:
            time.sleep(args.step_sleep)
        if progress:
            step_time = time.perf_counter() - step_start
            progress.write(json.dumps({
                "step": step, "step_time_s": round(step_time, 6), "time": round(time.time(), 3),
                "samples_per_s": round(args.batch * world / max(step_time, 1e-9), 3),
                "total_steps": args.steps}) + "\n")
            progress.flush()
        if step % args.log_every == 0 or step == args.steps:
            dt = max(time.time() - t0, 1e-9)
            log(rank, f"step {step} loss {window_loss / window_n:.4f} "
                      f"tokens/s {tokens / dt:.0f} step/s {window_n / dt:.2f}")
            t0, tokens, window_loss, window_n = time.time(), 0, 0.0, 0
        # Every rank must checkpoint at the same step: agree on the request first.
        requested = CHECKPOINT_REQUESTED
        if distributed:
            flag = torch.tensor([1 if requested else 0], device=device)
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
            requested = bool(flag.item())
        if requested:
            CHECKPOINT_REQUESTED = False
            checkpoint("requested")
        elif args.checkpoint_every > 0 and step % args.checkpoint_every == 0:
            checkpoint("periodic")
    if ckpt_dir and (args.checkpoint_every <= 0 or step % args.checkpoint_every != 0):
        checkpoint("final")
    log(rank, f"done at step {step}")
    if progress:
        progress.close()
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
