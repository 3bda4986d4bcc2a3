#!/usr/bin/env python3
"""Lloyd-Max quantizers for the standard normal N(0,1): the 8- and 16-level
codebooks of the tq3/tq4 KV-cache formats (kernels/kvq.h, kvq_ref.c).

Standard library only (Python 3.11; math.erf): no numpy/scipy needed.
Iterates the two Lloyd-Max conditions in double precision until they hold
to 1e-15: every boundary is the midpoint of its two centroids, every
centroid the conditional mean of N(0,1) on its cell,
    E[X | a < X < b] = (phi(a) - phi(b)) / (Phi(b) - Phi(a)).
Prints the centroids (as C initializers, positive half; the codebook is
symmetric) and the mean squared error E[(X - Q(X))^2], which
tests/test_kvq.c uses as the theoretical distortion of tq4/tq3.

Usage: python3 tests/ref/gen_lloyd_max.py
"""
import math


def phi(x):
    return 0.0 if math.isinf(x) else math.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)


def Phi(x):
    return 0.5 * (1 + math.erf(x / math.sqrt(2)))


def lloyd_max(levels):
    c = [(-3 + 6 * (i + 0.5) / levels) for i in range(levels)]
    for _ in range(100000):
        b = [-math.inf] + [(c[i] + c[i + 1]) / 2 for i in range(levels - 1)] + [math.inf]
        n = [(phi(b[i]) - phi(b[i + 1])) / (Phi(b[i + 1]) - Phi(b[i])) for i in range(levels)]
        delta = max(abs(x - y) for x, y in zip(c, n))
        c = n
        if delta < 1e-15:
            break
    b = [-math.inf] + [(c[i] + c[i + 1]) / 2 for i in range(levels - 1)] + [math.inf]
    # E[(X - c_i)^2 ; cell i] = E[X^2 ; cell] - 2 c_i E[X ; cell] + c_i^2 P(cell)
    mse = 0.0
    for i in range(levels):
        a, z = b[i], b[i + 1]
        p = Phi(z) - Phi(a)
        m1 = phi(a) - phi(z)
        ax = 0.0 if math.isinf(a) else a * phi(a)
        zx = 0.0 if math.isinf(z) else z * phi(z)
        m2 = p + ax - zx
        mse += m2 - 2 * c[i] * m1 + c[i] * c[i] * p
    return c, mse


if __name__ == "__main__":
    for levels in (8, 16):
        c, mse = lloyd_max(levels)
        half = c[levels // 2:]
        print(f"/* {levels} levels: MSE {mse:.9f} */")
        print("{ " + ", ".join(f"{x:.12f}" for x in half) + " }")
