"""A loop with no optimizer: steps are marked with tracelens.collectors.step()."""
import torch

import tracelens.collectors

a = torch.randn(256, 256)
for _ in range(8):
    for _ in range(4):
        a = torch.tanh(a @ a)
    tracelens.collectors.step()
