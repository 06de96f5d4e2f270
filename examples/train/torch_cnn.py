#!/usr/bin/env python3
"""torch_cnn.py - examples/train's CNN (`train --model cnn`) in PyTorch, for
a side-by-side measurement on the same GPU (scripts/device-check.sh).

The same model (cnn.h): conv3x3(1->16, no bias) + BatchNorm2d + ReLU +
maxpool2, conv3x3(16->32, no bias) + BatchNorm2d + ReLU + maxpool2, linear
(32*7*7 -> 10); He-normal weights, zero biases. The same data: the IDX
Fashion-MNIST files `train` reads (--data DIR, first --limit-train /
--limit-test samples), normalised as the trainer does ((p/255 - 0.2860) /
0.3530). The same optimiser and schedule as `train` at np 1: AdamW
(betas 0.9/0.999, eps 1e-8, weight decay 0.01 on the conv and linear
weights only), peak rate --lr (train's default for the CNN at one
worker), linear warm-up over 5% of the steps then cosine, per-worker
batch --batch-size, the last partial batch dropped. --precision bf16 is
torch.autocast(bfloat16) with float32 master weights (what train's bf16
does), fp32 plain float32.

The data set lives in GPU memory (PyTorch's fast path for a data set this
small); each step gathers its shuffled batch on the GPU. data_wait is the
GPU time of those gathers (CUDA events) over the training time.

Prints one line, easy to parse:
  torch_cnn: samples/s 12345.6 test_acc 0.8123 data_wait 0.4% loss 0.51
  epochs 1 batch 32 precision bf16 device cuda train 60000 test 10000
"""
import argparse
import gzip
import math
import os
import struct
import sys
import time

import torch
from torch import nn


def read_idx(path, limit):
    """The IDX file at path (or path + '.gz'): a uint8 tensor, the first
    `limit` records (all for 0)."""
    for p in (path + ".gz", path):
        if os.path.exists(p):
            opener = gzip.open if p.endswith(".gz") else open
            with opener(p, "rb") as f:
                data = f.read()
            break
    else:
        sys.exit(f"torch_cnn: {path}(.gz) not found")
    magic, = struct.unpack(">I", data[:4])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    arr = torch.frombuffer(bytearray(data), dtype=torch.uint8,
                           offset=4 + 4 * dims).reshape(shape)
    return arr[:limit] if limit else arr


def model():
    net = nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
        nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32),
        nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 10))
    for m in net.modules():
        if isinstance(m, (nn.Conv2d, nn.Linear)):
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            if m.bias is not None:
                nn.init.zeros_(m.bias)
    return net


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--lr", type=float, default=5e-3 / 4)
    ap.add_argument("--limit-train", type=int, default=0)
    ap.add_argument("--limit-test", type=int, default=0)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seed", type=int, default=42)
    a = ap.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_cnn: --device cuda: torch sees no CUDA device")
    dev = torch.device(a.device)
    torch.manual_seed(a.seed)

    def tensors(prefix, limit):
        x = read_idx(os.path.join(a.data, prefix + "-images-idx3-ubyte"), limit)
        y = read_idx(os.path.join(a.data, prefix + "-labels-idx1-ubyte"), limit)
        x = x.to(dev, torch.float32)
        x = ((x / 255.0 - 0.2860) / 0.3530).unsqueeze(1)
        return x, y.to(dev, torch.int64)

    xtr, ytr = tensors("train", a.limit_train)
    xte, yte = tensors("t10k", a.limit_test)
    n = xtr.shape[0]
    steps_per_epoch = n // a.batch_size
    if steps_per_epoch < 1:
        sys.exit(f"torch_cnn: {n} samples do not fill a batch of {a.batch_size}")
    total = steps_per_epoch * a.epochs
    warmup = max(1, int(total * 0.05))

    net = model().to(dev)
    decay = [p for n_, p in net.named_parameters()
             if p.dim() > 1]  # conv and linear weights
    rest = [p for n_, p in net.named_parameters() if p.dim() <= 1]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                             {"params": rest, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.999), eps=1e-8)

    def rate(step):  # train's lr_at (optim.c), as a factor of the peak
        if step < warmup:
            return (step + 1) / warmup
        t = (step - warmup) / max(1, total - warmup)
        return 0.5 * (1.0 + math.cos(math.pi * t))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, rate)
    lossf = nn.CrossEntropyLoss()
    def cast():  # a fresh autocast context per use
        return torch.autocast(device_type=dev.type, dtype=torch.bfloat16,
                              enabled=a.precision == "bf16")
    use_events = dev.type == "cuda"
    gathers = []
    loss_sum = torch.zeros((), device=dev)
    if use_events:
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(a.epochs):
        perm = torch.randperm(n, device=dev)
        for s in range(steps_per_epoch):
            if use_events:
                e0 = torch.cuda.Event(enable_timing=True)
                e1 = torch.cuda.Event(enable_timing=True)
                e0.record()
            idx = perm[s * a.batch_size:(s + 1) * a.batch_size]
            xb, yb = xtr[idx], ytr[idx]
            if use_events:
                e1.record()
                gathers.append((e0, e1))
            with cast():
                loss = lossf(net(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
            loss_sum += loss.detach().float()
    if use_events:
        torch.cuda.synchronize()
    train_s = time.perf_counter() - t0
    wait_ms = sum(e0.elapsed_time(e1) for e0, e1 in gathers)

    net.eval()
    correct = 0
    with torch.no_grad(), cast():
        for i in range(0, xte.shape[0], 500):
            correct += (net(xte[i:i + 500]).argmax(1) ==
                        yte[i:i + 500]).sum().item()
    acc = correct / max(1, xte.shape[0])
    print(f"torch_cnn: samples/s {total * a.batch_size / train_s:.1f} "
          f"test_acc {acc:.4f} "
          f"data_wait {100.0 * wait_ms / 1000.0 / train_s:.1f}% "
          f"loss {loss_sum.item() / total:.4f} epochs {a.epochs} "
          f"batch {a.batch_size} precision {a.precision} device {dev.type} "
          f"train {n} test {xte.shape[0]}", flush=True)


if __name__ == "__main__":
    main()
