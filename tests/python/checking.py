"""What the workers (w_*.py, run under hkrun) check with: a failure names
the rank, and every check is counted for the worker's last line."""

import torch


class Checks:
    def __init__(self, rank):
        self.rank = rank
        self.count = 0

    def fail(self, msg):
        raise AssertionError("rank %d: %s" % (self.rank, msg))

    def ok(self, cond, what):
        if not cond:
            self.fail(what)
        self.count += 1

    def _same_kind(self, got, want, what):
        if got is None:
            self.fail("%s: got None" % what)
        if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape):
            self.fail("%s: got %s %s, want %s %s" % (
                what, got.dtype, tuple(got.shape), want.dtype,
                tuple(want.shape)))

    def _differs(self, got, want, what):
        self.fail("%s: got %s want %s" % (what, got.reshape(-1)[:8].tolist(),
                                          want.reshape(-1)[:8].tolist()))

    def equal(self, got, want, what):
        """The same dtype, shape and values."""
        self._same_kind(got, want, what)
        if not torch.equal(got, want):
            self._differs(got, want, what)
        self.count += 1

    def close(self, got, want, what, tol=1e-6):
        """The same dtype and shape, values within tol (relative and
        absolute)."""
        self._same_kind(got, want, what)
        if not torch.allclose(got, want, rtol=tol, atol=tol):
            self._differs(got, want, what)
        self.count += 1

    def raises(self, exc, fn, what, *words):
        """fn() raises exc, whose message holds every word; returns it."""
        try:
            fn()
        except exc as e:
            for w in words:
                self.ok(w in str(e), "%s: message lacks %r: %s" % (what, w, e))
            return e
        except Exception as e:
            self.fail("%s raised %s (%s), not %s" % (what, type(e).__name__,
                                                     e, exc.__name__))
        self.fail("%s: no exception" % what)
