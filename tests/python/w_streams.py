"""Worker: a completed hk.torch operation marks its CUDA tensors as used on
hk's own stream (record_on_hk_stream, tensor.record_stream), so that
PyTorch's caching allocator cannot reuse their memory before hk's reads
and writes of it have run.

This torch may have no CUDA: the CUDA tensors are stand-ins that record
the calls made on them, and torch's stream objects (ExternalStream,
current_stream) are stand-ins too. hk's stream is the real one:
hk_device_stream() of the emulated device under HK_DEVICE=emu, NULL
under HK_DEVICE=none (nothing is marked then). A real allreduce of a CPU
tensor carries one stand-in through Handle.synchronize's device path.
Prints "streams ok: N checks".
"""

import os
import types

import torch

import hk.torch as hvd
from hk.torch import _submit
from checking import Checks

hvd.init()
R, N = hvd.rank(), hvd.size()
check = Checks(R)
emu = os.environ.get("HK_DEVICE") == "emu"


class CudaStandIn:
    """A CUDA tensor as record_on_hk_stream sees it."""
    is_cuda = True

    def __init__(self, index):
        self.device = "cuda:%d" % index
        self.recorded = []

    def record_stream(self, stream):
        self.recorded.append(stream)


made = []


def make_stream(ptr, device):
    made.append((ptr, device))
    return ("hk stream", ptr, device)


ptr = _submit.lib().hk_device_stream()
check.ok(bool(ptr) == emu, "hk_device_stream() is %r with HK_DEVICE=%s" %
         (ptr, os.environ.get("HK_DEVICE")))

# the function alone: every CUDA tensor once, nothing else, one stream
a, b = CudaStandIn(0), CudaStandIn(0)
cpu = torch.ones(3)
parts = [types.SimpleNamespace(keep=[b"name", cpu, a, a]),
         types.SimpleNamespace(keep=[b, None]),
         types.SimpleNamespace(keep=None)]
check.ok(_submit.record_on_hk_stream(parts, 0x1234, make_stream) == 2,
         "two CUDA tensors marked")
check.ok(a.recorded == [("hk stream", 0x1234, "cuda:0")] and
         b.recorded == a.recorded, "each marked once on hk's stream: %r %r"
         % (a.recorded, b.recorded))
check.ok(made == [(0x1234, "cuda:0")], "one stream made: %r" % made)
check.ok(_submit.record_on_hk_stream(parts, None, make_stream) == 0 and
         len(a.recorded) == 1, "no device stream: nothing marked")

# through a handle: an allreduce whose handle is on a (stand-in) GPU
# completes on the device path (hk_wait_stream) and marks what it holds
saved = (torch.cuda.current_stream, _submit._external_stream)
torch.cuda.current_stream = lambda device=None: types.SimpleNamespace(
    cuda_stream=0)
_submit._external_stream = make_stream
try:
    t = torch.arange(5, dtype=torch.float32) + R
    h = hvd.allreduce_async(t, name="streams", op=hvd.Sum)
    held = CudaStandIn(0)
    h.parts[0].keep.append(held)
    h._device = torch.device("cuda", 0)
    got = hvd.synchronize(h)
finally:
    torch.cuda.current_stream, _submit._external_stream = saved
want = torch.arange(5, dtype=torch.float32) * N + N * (N - 1) / 2
check.ok(torch.equal(got, want), "allreduce: %s, want %s" % (got, want))
check.ok(held.recorded == ([("hk stream", ptr, "cuda:0")] if emu else []),
         "synchronize marked %r on hk's stream %r" % (held.recorded, ptr))

hvd.shutdown()
print("streams ok: %d checks" % check.count)
