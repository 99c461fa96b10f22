#!/usr/bin/python3
"""A small inference service for Tianshu: a request loop over TinyGPT with a latency log.

Requests arrive as a Poisson process at --rate per second (generated in-process, so the
example needs no network); each decodes --new-tokens tokens greedily. Every request's latency
goes to --latency-log (default: latency-rank<R>.log in the working directory) and a summary
line (count, p50, p99, over the last --report-every seconds) to stdout. SIGUSR1 writes the
checkpoint marker at once (a service has no training state); SIGTERM ends it with a summary.
Creates $TIANSHU_READY_FILE once it serves (the agent signals only ready ranks).

    /usr/bin/python3 infer_service.py --rate 20 --duration 10
"""
import argparse
import json
import os
import random
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402

import tinygpt  # noqa: E402

STOP = False
MARK = False


def on_term(signum, frame):
    global STOP
    STOP = True


def on_usr1(signum, frame):
    global MARK
    MARK = True


def percentile(values, q):
    if not values:
        return 0.0
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rate", type=float, default=10.0, help="requests per second")
    p.add_argument("--duration", type=float, default=0.0, help="seconds; 0 = until SIGTERM")
    p.add_argument("--new-tokens", type=int, default=16)
    p.add_argument("--prompt", type=int, default=16)
    p.add_argument("--report-every", type=float, default=5.0)
    p.add_argument("--latency-log", default="")
    p.add_argument("--checkpoint", default="", help="a train_gpt.py checkpoint to serve")
    args = p.parse_args()

    rank = int(os.environ.get("RANK", "0"))
    marker = os.environ.get("TIANSHU_CHECKPOINT_MARKER", "")
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGUSR1, on_usr1)
    torch.set_num_threads(1)
    model = tinygpt.TinyGPT(d_model=32, seq=32)
    if args.checkpoint:
        model.load_state_dict(torch.load(args.checkpoint, map_location="cpu")["model"])
    model.eval()
    log_path = args.latency_log or f"latency-rank{rank}.log"
    rng = random.Random(rank)
    served = 0
    window = []
    all_lat = []
    start = time.time()
    last_report = start
    next_arrival = start
    print(f"[rank {rank}] serving at {args.rate} req/s, latency log {log_path}", flush=True)
    ready = os.environ.get("TIANSHU_READY_FILE", "")
    if ready:  # handlers set, model loaded: the agent may send SIGUSR1 from now on
        open(ready, "w").close()
    with open(log_path, "a") as lat_log, torch.no_grad():
        while not STOP and (args.duration <= 0 or time.time() - start < args.duration):
            global MARK
            if MARK:
                MARK = False
                if marker:
                    with open(marker + ".tmp", "w") as f:
                        json.dump({"step": served, "path": ""}, f)
                    os.replace(marker + ".tmp", marker)
            now = time.time()
            if now < next_arrival:
                time.sleep(min(next_arrival - now, 0.05))
                continue
            arrival = next_arrival
            next_arrival += rng.expovariate(args.rate)
            idx = torch.randint(0, len(tinygpt.VOCAB), (1, args.prompt))
            for _ in range(args.new_tokens):
                logits = model(idx[:, -model.seq:])
                idx = torch.cat([idx, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
            latency_ms = (time.time() - arrival) * 1000.0
            served += 1
            window.append(latency_ms)
            all_lat.append(latency_ms)
            lat_log.write(f"{time.time():.3f} {latency_ms:.2f}\n")
            if time.time() - last_report >= args.report_every:
                lat_log.flush()
                print(f"[rank {rank}] requests {served} p50_ms {percentile(window, 0.5):.1f} "
                      f"p99_ms {percentile(window, 0.99):.1f}", flush=True)
                window = []
                last_report = time.time()
    print(f"[rank {rank}] done: requests {served} p50_ms {percentile(all_lat, 0.5):.1f} "
          f"p99_ms {percentile(all_lat, 0.99):.1f}", flush=True)


if __name__ == "__main__":
    main()
