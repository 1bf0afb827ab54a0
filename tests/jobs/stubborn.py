"""Ignores SIGINT and SIGTERM, noting each one it gets in the log file given as the first argument, until
SIGKILL ends it. With --train it also trains a tiny model (torch) without end, one optimizer step every
20 ms, noting the step count after each."""
import os
import signal
import sys
import time

log = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def note(text: str) -> None:
    os.write(log, (text + "\n").encode())   # unbuffered: safe from a signal handler


for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, lambda signum, frame: note(signal.Signals(signum).name))

train = "--train" in sys.argv
if train:
    import torch

    w = torch.nn.Linear(8, 8)
    opt = torch.optim.SGD(w.parameters(), lr=0.01)
note("ready")
n = 0
while True:
    if train:
        w(torch.randn(4, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
        n += 1
        note(f"step {n}")
    time.sleep(0.02)
