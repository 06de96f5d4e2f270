"""Gradient compression for allreduce, as horovod.torch.Compression.

``Compression.fp16`` casts floating tensors to float16 before the
allreduce and back to their own type afterwards, in Python, for CPU and
CUDA tensors alike: hk then reduces float16 (each pairwise step rounded
to nearest even, as hk.h documents), so about 3 significant decimal
digits survive and values above 65504 overflow, as with Horovod.

For CUDA float32 tensors hk can do the same cast inside its own pack and
unpack kernels instead: run the job with ``HK_COMPRESSION=fp16`` (or
``bf16``) and ``Compression.none``; that setting is per job, read by
libhk, and applies to every float32 device tensor.
"""

import torch

__all__ = ["Compressor", "NoneCompressor", "FP16Compressor", "Compression"]


class Compressor:
    """Interface: compress(tensor) -> (tensor, ctx); decompress(tensor, ctx)
    -> tensor."""

    @staticmethod
    def compress(tensor):
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, ctx):
        raise NotImplementedError


class NoneCompressor(Compressor):
    """No compression: the tensor itself."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, ctx):
        return tensor


class FP16Compressor(Compressor):
    """Floating tensors travel as float16; others are left alone."""

    @staticmethod
    def compress(tensor):
        dtype = tensor.dtype
        if tensor.dtype.is_floating_point and tensor.dtype != torch.float16:
            tensor = tensor.type(torch.float16)
        return tensor, dtype

    @staticmethod
    def decompress(tensor, ctx):
        if ctx is not None and tensor.dtype != ctx:
            tensor = tensor.type(ctx)
        return tensor


class Compression:
    """The compressors by name: Compression.none, Compression.fp16."""

    none = NoneCompressor
    fp16 = FP16Compressor
