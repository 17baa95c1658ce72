#!/usr/bin/env python3
"""Winograd F(m, r) matrices (Toom-Cook, Lavin & Gray 2016), exactly, in fractions.

    y = A^T [ (G g) * (B^T d) ]        1-D correlation y_i = sum_k g_k d_{i+k}
    Y = A^T [ (G g G^T) * (B^T d B) ] A    its 2-D nesting (PyTorch's conv2d)

Derivation (n = m + r - 1 points: n - 1 finite points a_j, then infinity).
Linear convolution s = g * e (g of degree r-1, e of degree m-1) is
s = C [ (Eg g) * (Ee e) ]: evaluate both at the points (at infinity: the
leading coefficient), multiply, interpolate. Eg (n x r) and Ee (n x m) are
Vandermonde rows [1, a, a^2, ...] with [0 .. 0 1] for infinity; interpolation
is s(x) = sum_j s(a_j) L_j(x) + s_inf M(x), M(x) = prod_j (x - a_j), so C's
column j holds L_j's coefficients and its last column M's. Correlation by
g is the transpose of convolution by g, hence A^T = Ee^T, G = Eg,
B^T = C^T. The factor 1/f_j of L_j = P_j / f_j (P_j = prod_{l != j}(x - a_l),
f_j = P_j(a_j)) is moved from B^T into G's row j, so B^T is integer (the input
transform, run on every tile, has no divisions) and the filter transform,
run once per step, carries the fractions.

Points. The finite points are 0, 1, -1 and then, for F(2, 5), 1/2 and -2
rather than the textbook 2 and -2: float32 Winograd loses accuracy as the
transforms' entries spread (Barabasz et al., "Error analysis and improving
the accuracy of Winograd convolution", 2020), and on the CNN's second layer
(uniform inputs, normal weights and output gradients, numpy float32) the
max error relative to the largest output fell from 2.3e-6 to 7.8e-7 in the
forward, 2.8e-6 to 1.3e-6 in the input gradient and 4.9e-6 to 1.7e-6 in the
weight gradient; the best of the pairs among +-1/2, +-2, +-3/2, +-2/3,
+-1/3, +-3, +-1/4 tried. Each row of B^T is then scaled to integers
(the factor goes into G's row), so the input transform stays in small
integers.

Run: /usr/bin/python3 scripts/winograd_matrices.py [m r] (default 2 5, pfl's
conv2d Winograd path in src/nn/layers.c). It checks the identity on random
integers exactly and prints the matrices.
"""
import random
import sys
from fractions import Fraction


def poly_mul(p, q):
    out = [Fraction(0)] * (len(p) + len(q) - 1)
    for i, a in enumerate(p):
        for j, b in enumerate(q):
            out[i + j] += a * b
    return out


def points(n):
    if n == 6:
        return [Fraction(0), Fraction(1), Fraction(-1), Fraction(1, 2), Fraction(-2)]  # see the header
    pts = [Fraction(0)]
    k = 1
    while len(pts) < n - 1:
        pts.append(Fraction(k))
        if len(pts) < n - 1:
            pts.append(Fraction(-k))
        k += 1
    return pts  # {0, 1, -1, 2, -2, ...}; infinity is the n-th point


def lcm(a, b):
    from math import gcd
    return a * b // gcd(a, b)


def integer_rows(G, BT):
    """Scales each row of B^T by the lcm of its denominators, G's row by the inverse."""
    for j, row in enumerate(BT):
        k = 1
        for x in row:
            k = lcm(k, x.denominator)
        BT[j] = [x * k for x in row]
        G[j] = [x / k for x in G[j]]
    return G, BT


def matrices(m, r):
    n = m + r - 1
    a = points(n)
    AT = [[aj ** i for aj in a] + [Fraction(1 if i == m - 1 else 0)] for i in range(m)]
    G, BT = [], []
    for j, aj in enumerate(a):
        P = [Fraction(1)]
        f = Fraction(1)
        for l, al in enumerate(a):
            if l != j:
                P = poly_mul(P, [-al, Fraction(1)])
                f *= aj - al
        BT.append(P + [Fraction(0)] * (n - len(P)))
        G.append([aj ** k / f for k in range(r)])
    M = [Fraction(1)]
    for al in a:
        M = poly_mul(M, [-al, Fraction(1)])
    BT.append(M)
    G.append([Fraction(1 if k == r - 1 else 0) for k in range(r)])
    G, BT = integer_rows(G, BT)
    return AT, G, BT


def check(AT, G, BT, m, r, trials=20):
    n = m + r - 1
    for _ in range(trials):
        g = [Fraction(random.randint(-9, 9)) for _ in range(r)]
        d = [Fraction(random.randint(-9, 9)) for _ in range(n)]
        Gg = [sum(G[j][k] * g[k] for k in range(r)) for j in range(n)]
        Bd = [sum(BT[j][l] * d[l] for l in range(n)) for j in range(n)]
        y = [sum(AT[i][j] * Gg[j] * Bd[j] for j in range(n)) for i in range(m)]
        assert y == [sum(g[k] * d[i + k] for k in range(r)) for i in range(m)], "identity fails"


def show(name, M):
    print(f"{name} =")
    for row in M:
        print("  [" + ", ".join(f"{str(x):>6}" for x in row) + "]")


if __name__ == "__main__":
    m, r = (int(sys.argv[1]), int(sys.argv[2])) if len(sys.argv) == 3 else (2, 5)
    AT, G, BT = matrices(m, r)
    check(AT, G, BT, m, r)
    print(f"F({m}, {r}): identity checked exactly on 20 random integer cases")
    show("A^T", AT)
    show("G", G)
    show("B^T", BT)
